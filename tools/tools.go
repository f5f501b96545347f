// Package tools is what runs a tool call (§18): the Executor interface that every provider
// kind implements — the built-in provider (tools/builtin) and MCP servers (tools/mcp) — and
// the request it receives. The call workflow (workflows/tool.go) decides whether and how often
// an attempt runs; an Executor runs one attempt, in an activity, and does I/O.
package tools

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// BuiltinProviderID is the provider_id of the built-in provider: confined file and process
// tools for agents that have no MCP server of their own.
const BuiltinProviderID = "builtin"

// Request is one attempt of one tool call, as the executor receives it. The arguments were
// already validated against the tool's input schema and the policy already resolved
// (tool.Effective); the executor enforces what only the running tool can: the worktree
// confinement, the CPU budget, the network policy of the processes it starts.
type Request struct {
	// CallID is the call's id (§18.2).
	CallID string
	// ProviderID and ToolName name the tool.
	ProviderID, ToolName string
	// ContentType is the arguments' content type; always JSON here.
	ContentType string
	// Args are the arguments, a JSON object ("{}" when the caller sent none); an object in
	// the call's workflow input, not base64 (jsonform.Bytes).
	Args jsonform.Bytes
	// Policy is the effective execution policy (§18.5).
	Policy tool.Policy
	// Worktree is the absolute path of the caller's bound worktree (§16), or "" when the
	// caller is not bound; a tool that needs one refuses the call then.
	Worktree string
	// Attempt counts attempts from 1.
	Attempt int
	// MaxConcurrency is the tool's max_concurrency (§18.1): how many of its calls may run at
	// once across every worker; 0 is no limit. The activity holds a slot while the executor
	// runs, so executors need not count.
	MaxConcurrency uint32 `json:",omitempty"`
}

// Emit hands one frame of output to the caller while the tool runs (CallStream, §18.2): the
// frame is stored before Emit returns, so a caller that reconnects sees it. An error means
// the call cannot take more frames — it was cancelled and its final frame written — and the
// executor should stop.
type Emit func(ctx context.Context, contentType string, data []byte) error

// Result is the tool's final output: the data of the call's final frame.
type Result struct {
	// ContentType is the data's content type, e.g. "application/json".
	ContentType string
	// Data is the result.
	Data []byte
}

// Executor runs the tools of one provider. Call runs one attempt and returns its result or a
// *tool.Error with the structured code of §18.3; it returns when ctx ends (cancellation or
// deadline) with CANCELLED or TOOL_TIMEOUT, after telling the tool to stop and cleaning up
// what it started (§18.6). Executors are safe for concurrent use.
type Executor interface {
	Call(ctx context.Context, req Request, emit Emit) (Result, error)
}

// Describer is an Executor that knows its own descriptors (the built-in provider): they are
// registered under its provider id when the server starts.
type Describer interface {
	Descriptors() []*connectorpb.ToolDescriptor
}
