package store

import (
	"context"
	"errors"
	"time"
)

// ErrCallClosed reports that a tool call already has its final frame: nothing more is
// appended to it (§18.6: the final frame always ends the stream).
var ErrCallClosed = errors.New("store: tool call closed")

// ToolCallRecord is one tool call's owner and the running totals of its frames (§18.2, §19).
type ToolCallRecord struct {
	// CallID is the call's id.
	CallID string
	// Caller is the proven principal that made the call; only it (or an operator) streams
	// or cancels it.
	Caller string
	// ProviderID and ToolName name the tool.
	ProviderID, ToolName string
	// Frames and Bytes count the frames stored so far, the final one included, and the
	// bytes of their data.
	Frames, Bytes uint64
	// Final reports that the final frame is stored.
	Final bool
	// CreatedAt is when the call was recorded.
	CreatedAt time.Time
}

// ToolFrameRecord is one stored frame of a tool call's output.
type ToolFrameRecord struct {
	// CallID is the call's id.
	CallID string
	// FrameNo numbers the call's frames from 1, without gaps.
	FrameNo uint64
	// Final marks the call's last frame.
	Final bool
	// ContentType is the data's content type.
	ContentType string
	// Data is the frame's payload.
	Data []byte
	// Summary is the final frame's summary (JSON); empty on other frames.
	Summary []byte
	// At is when the frame was stored.
	At time.Time
}

// ToolCallPhase selects tool calls by whether their final frame is stored.
type ToolCallPhase int

// Tool call phases of a ToolCallFilter.
const (
	// AnyToolCall matches every call.
	AnyToolCall ToolCallPhase = iota
	// OpenToolCall matches the calls without their final frame: those still running.
	OpenToolCall
	// FinalToolCall matches the calls whose final frame is stored: those that ended.
	FinalToolCall
)

// DefaultToolCallListLimit is the ListCalls limit used when the filter sets none.
const DefaultToolCallListLimit = 1000

// ToolCallFilter selects tool calls for ListCalls; empty fields match everything.
type ToolCallFilter struct {
	// Caller, ProviderID and ToolName must equal the call's when set.
	Caller, ProviderID, ToolName string
	// Phase keeps the open calls, the ended ones, or both.
	Phase ToolCallPhase
	// Limit caps the calls returned; zero or negative means DefaultToolCallListLimit.
	Limit int
}

// ListedToolCall is one call as ListCalls returns it: its record and, once it ended, the
// summary of its final frame (how it ended, JSON as Finish stored it).
type ListedToolCall struct {
	ToolCallRecord
	// Summary is the final frame's summary; empty while the call is open.
	Summary []byte
}

// ToolCalls stores tool calls and their frames as they come (§18.2 CallStream), so that a
// client that reconnects resumes from its last frame_no, and a call's frame count and bytes
// can be reported (§19). The store numbers frames: the next frame of a call is one more than
// the last, whichever worker wrote the last.
type ToolCalls interface {
	// CreateCall records a new call and, in the same write, the handoffs that start its
	// workflow (the transactional outbox: a recorded call always gets its workflow). When the
	// call_id is known it writes nothing and returns the stored record with created=false;
	// the caller compares owners.
	CreateCall(ctx context.Context, rec ToolCallRecord, entries ...OutboxEntry) (stored ToolCallRecord, created bool, err error)
	// GetCall returns a call or ErrNotFound.
	GetCall(ctx context.Context, callID string) (ToolCallRecord, error)
	// OpenCalls returns the calls without their final frame that caller made or whose
	// provider is providerID, oldest first; an empty caller or providerID matches nothing.
	// An agent's end releases them (§8.4): its own calls as caller "agent:<agent_id>", the
	// calls to the tools it provides as provider <agent_id>.
	OpenCalls(ctx context.Context, caller, providerID string) ([]ToolCallRecord, error)
	// ListCalls returns the calls that match the filter, most recently created first (then
	// by call_id), the first Limit of them, each with its final frame's summary; none is an
	// empty slice.
	ListCalls(ctx context.Context, f ToolCallFilter) ([]ListedToolCall, error)
	// AppendFrame stores the call's next, non-final frame and returns it numbered; ErrCallClosed
	// once the final frame is stored; ErrNotFound for an unknown call.
	AppendFrame(ctx context.Context, callID, contentType string, data []byte) (ToolFrameRecord, error)
	// Finish stores the call's final frame, its summary built by summarize from the totals of
	// the frames before it, and returns it with created=true. When the call already has its
	// final frame it stores nothing and returns that one with created=false: the first
	// final frame wins, so the call's end is decided once (a cancel racing the result).
	Finish(ctx context.Context, callID, contentType string, data []byte, summarize func(frames, bytes uint64) []byte) (final ToolFrameRecord, created bool, err error)
	// Frames returns up to limit frames of the call numbered after `after`, in order; none
	// is an empty slice.
	Frames(ctx context.Context, callID string, after uint64, limit int) ([]ToolFrameRecord, error)
	// AcquireSlot takes one of the limit slots of a tool (its descriptor's max_concurrency,
	// across every worker) for a call, for lease, and reports true; a call that holds one
	// renews it. It reports false when limit other calls hold slots whose leases have not
	// passed: a worker that died frees its call's slot when the lease passes.
	AcquireSlot(ctx context.Context, providerID, toolName, callID string, limit int, lease time.Duration) (bool, error)
	// ReleaseSlot frees the call's slot of the tool, if it holds one.
	ReleaseSlot(ctx context.Context, providerID, toolName, callID string) error
}
