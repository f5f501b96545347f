package tool

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
)

// Code is the error_code of a TOOL_ERROR (§18.3). ToolError.error_code is a string on the
// wire, so the codes are strings too, spelled as the spec spells them.
type Code string

// The structured error codes of a TOOL_ERROR. The first three are §18.3's examples; the
// budget codes are §18.5.1's; the Cancel answers are §18.6's; the rest name failures the spec
// leaves to implementations.
const (
	// CodeToolTimeout: one attempt ran past the effective timeout (§18.2, §18.3).
	CodeToolTimeout Code = "TOOL_TIMEOUT"
	// CodeValidation: the call is malformed — unknown policy value, arguments that do not
	// satisfy the input schema, a bad call_id (§18.3).
	CodeValidation Code = "VALIDATION_ERROR"
	// CodePermissionDenied: the caller may not run the tool, or an approval was refused
	// (§18.3, §18.4).
	CodePermissionDenied Code = "PERMISSION_DENIED"
	// CodeWorktreeNotBound: the tool needs a worktree (needs_worktree, or the policy's
	// worktree_required) and the calling agent is bound to none (§16: "MUST fail with error
	// code worktree_not_bound").
	CodeWorktreeNotBound Code = "WORKTREE_NOT_BOUND"
	// CodeWallTimeout: the whole execution, retries included, ran past budget_wall_ms
	// (§18.5.1).
	CodeWallTimeout Code = "WALL_TIMEOUT"
	// CodeCPUBudgetExceeded: the processes the tool spawned used more than budget_cpu_ms of
	// CPU time (§18.5.1).
	CodeCPUBudgetExceeded Code = "CPU_BUDGET_EXCEEDED"
	// CodeCancelled: the call was cancelled; also Cancel's answer when cancellation was
	// initiated (§18.6).
	CodeCancelled Code = "CANCELLED"
	// CodeNotFound: Cancel named no known call, or the call named no known tool or provider
	// (§18.6).
	CodeNotFound Code = "NOT_FOUND"
	// CodeAlreadyCompleted: Cancel named a call that had already ended (§18.6).
	CodeAlreadyCompleted Code = "ALREADY_COMPLETED"
	// CodeToolFailed: the tool ran and reported a failure of its own (an MCP result with
	// isError, a process that exited non-zero).
	CodeToolFailed Code = "TOOL_FAILED"
	// CodeInterrupted: a non-idempotent call was lost mid-run (its worker died) and is not
	// run again, because §18.3 forbids retrying it; whether it took effect is unknown.
	CodeInterrupted Code = "INTERRUPTED"
	// CodeInternal: anything else went wrong on the server's side.
	CodeInternal Code = "INTERNAL_ERROR"
)

// codes lists every Code, in declaration order.
var codes = []Code{
	CodeToolTimeout, CodeValidation, CodePermissionDenied, CodeWorktreeNotBound, CodeWallTimeout,
	CodeCPUBudgetExceeded, CodeCancelled, CodeNotFound, CodeAlreadyCompleted,
	CodeToolFailed, CodeInterrupted, CodeInternal,
}

// Codes returns every error code, in a fixed order.
func Codes() []Code { return slices.Clone(codes) }

// Valid reports whether c is one of the codes above.
func (c Code) Valid() bool { return slices.Contains(codes, c) }

// Transient reports whether a failure with this code may succeed when tried again, so that a
// caller's bounded retries (§18.3) apply to it: a timed-out attempt, an interrupted one and an
// internal error. Whether a retry is allowed at all is the policy's business (Policy.MaxRetries
// is 0 for a non-idempotent tool); every other code is final.
func (c Code) Transient() bool {
	switch c {
	case CodeToolTimeout, CodeInterrupted, CodeInternal:
		return true
	}
	return false
}

// Error is a structured tool failure: the code of the TOOL_ERROR and a message for a person.
type Error struct {
	// Code is the TOOL_ERROR error_code.
	Code Code
	// Msg says what went wrong.
	Msg string
}

// Error renders "<CODE>: <message>".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Msg }

// Errorf builds an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Proto renders the error as the TOOL_ERROR of a call.
func (e *Error) Proto(callID string) *toolpb.ToolError {
	return &toolpb.ToolError{CallId: callID, ErrorCode: string(e.Code), Message: e.Msg}
}

// CodeOf returns the code of an *Error wrapped in err, CodeInternal for any other error, and
// "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var te *Error
	if errors.As(err, &te) {
		return te.Code
	}
	return CodeInternal
}
