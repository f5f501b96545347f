package tool

import "encoding/json"

// The JSON payloads of tool calling (§18.2, §18.6). They are stored in workflow histories
// (Summary is part of the call workflow's activity inputs and results) and travel in
// envelopes and frames, so their JSON must never change: payload_test.go holds each to a
// golden encoding.

// Summary is the JSON summary of a call's final frame (§18.2, §18.6): how the call ended,
// and how much output came before the end — a cancelled call's partial results.
type Summary struct {
	// Status is "ok", "error" or "cancelled".
	Status string `json:"status"`
	// ErrorCode is the §18.3 code of a call that is not ok.
	ErrorCode string `json:"error_code,omitempty"`
	// Message says why, for a person.
	Message string `json:"message,omitempty"`
	// Frames counts the frames before the final one: the partial results a cancelled or
	// failed call leaves.
	Frames uint64 `json:"frames"`
	// Bytes counts the bytes of those frames' data.
	Bytes uint64 `json:"bytes"`
	// Partial reports that frames came before the end of a call that is not ok: §18.6's
	// partial_result indicator.
	Partial bool `json:"partial_result,omitempty"`
	// Attempt is the attempt that ended the call (0 when none ran).
	Attempt int `json:"attempt,omitempty"`
	// CancelledBy is who cancelled a cancelled call.
	CancelledBy string `json:"cancelled_by,omitempty"`
}

// JSON renders the summary.
func (s Summary) JSON() []byte {
	b, _ := json.Marshal(s) // a struct of strings and numbers always encodes
	return b
}

// CallPolicy is the execution policy a TOOL_CALL envelope carries (§18.2, §18.5): the
// provider agent honours it.
type CallPolicy struct {
	// TimeoutMs bounds the call; past it the scheduler ends the call TOOL_TIMEOUT.
	TimeoutMs int64 `json:"timeout_ms"`
	// BudgetWallMs is the call's wall-clock budget (0: none).
	BudgetWallMs int64 `json:"budget_wall_ms,omitempty"`
	// BudgetCPUMs is the call's CPU budget (0: none).
	BudgetCPUMs int64 `json:"budget_cpu_ms,omitempty"`
	// NetworkPolicy is the call's network policy, e.g. "DENY_ALL".
	NetworkPolicy string `json:"network_policy"`
	// PrivilegeLevel is the call's privilege level, e.g. "MINIMAL".
	PrivilegeLevel string `json:"privilege_level"`
	// WorktreeRequired says the call must run in the caller's worktree.
	WorktreeRequired bool `json:"worktree_required,omitempty"`
}

// CallPayload is the payload of a TOOL_CALL envelope the scheduler routes to a provider
// agent (§18.2). The agent answers with TOOL_RESULT envelopes (frames with "final": false,
// then the result) or a TOOL_ERROR, addressed to the scheduler with the call_id (ReplyPayload).
type CallPayload struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// ToolName names the tool.
	ToolName string `json:"tool_name"`
	// ProviderID names the tool's provider.
	ProviderID string `json:"provider_id"`
	// Args are the arguments (JSON, already valid against the input schema).
	Args json.RawMessage `json:"args"`
	// ContentType is the arguments' content type.
	ContentType string `json:"content_type"`
	// Policy is the effective execution policy.
	Policy CallPolicy `json:"execution_policy"`
	// Stream says the caller takes frames.
	Stream bool `json:"stream"`
	// Caller is who made the call.
	Caller string `json:"caller"`
	// Worktree is the caller's worktree, to which the provider confines the call (§18.2:
	// "Providers MUST run under the invoking Agent's confinement").
	Worktree string `json:"worktree,omitempty"`
}

// ReplyPayload is what a provider agent's TOOL_RESULT or TOOL_ERROR envelope to the
// scheduler carries (§18.2): the call_id (else the envelope's correlation_id), and either a
// result — a frame when "final" is false, the call's result otherwise (the default) — or an
// error_code and note.
type ReplyPayload struct {
	// CallID is the call answered.
	CallID string `json:"call_id"`
	// Status is "OK" on a TOOL_RESULT.
	Status string `json:"status,omitempty"`
	// ResultB64 is the result's or frame's data.
	ResultB64 []byte `json:"result_b64,omitempty"`
	// ContentType is the data's content type (default application/json).
	ContentType string `json:"content_type,omitempty"`
	// Final is false for a frame of a result still coming; absent or true for the result.
	Final *bool `json:"final,omitempty"`
	// ErrorCode is a TOOL_ERROR's §18.3 code.
	ErrorCode string `json:"error_code,omitempty"`
	// Note says what went wrong.
	Note string `json:"note,omitempty"`
}

// ResultPayload is the payload of the TOOL_RESULT envelope that tells the calling agent its
// call's result (§18.2), when it asked for an envelope reply.
type ResultPayload struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// Status is "OK".
	Status string `json:"status"`
	// ResultB64 is the final frame's data, base64.
	ResultB64 []byte `json:"result_b64"`
	// ContentType is the result's content type.
	ContentType string `json:"content_type"`
	// FrameNo is the final frame's frame_no: CallStream resumes from it.
	FrameNo uint64 `json:"frame_no"`
}

// ErrorPayload is the payload of the TOOL_ERROR envelope that tells the calling agent how
// its call failed (§18.2).
type ErrorPayload struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// ErrorCode is the §18.3 code.
	ErrorCode string `json:"error_code"`
	// Note says what happened.
	Note string `json:"note"`
	// PartialResult reports that frames came before the end (§18.6).
	PartialResult bool `json:"partial_result,omitempty"`
}
