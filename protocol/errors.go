// Package protocol holds SW4RM's pure, deterministic domain rules shared by the frontend, the
// store, the workflows and the SDK: envelope validation and the three-ID rules (§11), the
// message and agent lifecycle tables (§8, §11, Appendix C), the addressing rule (§12) and the
// ACK payload shape. Nothing here does I/O, reads the clock or generates randomness, so
// workflow code may call it.
package protocol

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// SchedulerID is the producer_id the server uses for envelopes it originates (NACKs, ACK
// notifications, registry events). It matches the RFC's Appendix D example (C.3) and is
// reserved: no agent may register under it.
const SchedulerID = "scheduler"

// Error is a protocol-level rejection carrying the spec's error_code (§11, §21).
type Error struct {
	// Code is the error_code from sw4rm.common.ErrorCode.
	Code commonpb.ErrorCode
	// Msg says what was wrong, for a person.
	Msg string
}

// Error renders "<error_code>: <message>", the format used in every rejection reason.
func (e *Error) Error() string { return CodeName(e.Code) + ": " + e.Msg }

// Errorf builds a protocol error with a formatted message.
func Errorf(code commonpb.ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf extracts the error_code of err: the code of a wrapped *Error, or INTERNAL_ERROR.
func CodeOf(err error) commonpb.ErrorCode {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return commonpb.ErrorCode_INTERNAL_ERROR
}

// CodeName returns the spec's lower-case spelling of an error code, e.g. "buffer_full"
// (§11 lists the codes that way); the enum name is used in ACK payloads instead.
func CodeName(c commonpb.ErrorCode) string {
	return strings.ToLower(c.String())
}
