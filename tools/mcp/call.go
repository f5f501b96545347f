package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// Result is what a tool call returned.
type Result struct {
	// Content is the result's content blocks as MCP JSON: an array of {type, ...} objects.
	Content json.RawMessage
	// Structured is the result's structuredContent as JSON; nil when there is none.
	Structured json.RawMessage
	// Text is the text of the text blocks, joined by newlines.
	Text string
}

// ContentType and Data are what a TOOL_RESULT frame carries (§18.2): the structured result
// when the tool gave one, else the content blocks, both JSON.
func (r Result) ContentType() string { return "application/json" }

// Data is the frame's payload; see ContentType.
func (r Result) Data() []byte {
	if r.Structured != nil {
		return r.Structured
	}
	return r.Content
}

// CallTool calls the named tool with JSON arguments (empty: none). Failures are *tool.Error:
// TOOL_FAILED when the tool reports an error (isError; the message is its text) — or
// PERMISSION_DENIED when that text says access was denied, which is how a server refuses
// what lies outside its confinement (the filesystem server: "Access denied - path outside
// allowed directories") —, VALIDATION_ERROR when the server refuses the name or the
// arguments, NOT_FOUND when it does not serve tools, CANCELLED or TOOL_TIMEOUT when ctx ends
// first — the SDK then sends notifications/cancelled so the server can stop (§18.6) — and
// INTERNAL_ERROR otherwise.
func (c *Client) CallTool(ctx context.Context, name string, args json.RawMessage) (Result, error) {
	return c.CallToolProgress(ctx, name, args, nil)
}

// CallToolProgress is CallTool that asks the server for progress (a progress token in the
// request's _meta) and hands each notification to onProgress, in the order they arrive,
// until the call returns; notifications that arrive later are dropped. onProgress runs on
// the session's reading goroutine: it must return at once, not wait for I/O. nil asks for no
// progress.
func (c *Client) CallToolProgress(ctx context.Context, name string, args json.RawMessage, onProgress func(Progress)) (Result, error) {
	p := &sdk.CallToolParams{Name: name}
	if len(strings.TrimSpace(string(args))) > 0 {
		if !json.Valid(args) {
			return Result{}, tool.Errorf(tool.CodeValidation, "the arguments to tool %q are not JSON", name)
		}
		p.Arguments = args
	}
	if onProgress != nil {
		token := c.progress.add(onProgress)
		defer c.progress.remove(token)
		p.SetProgressToken(token)
	}
	res, err := c.session.CallTool(ctx, p)
	if err != nil {
		if ctx.Err() == nil && connectionLost(err) {
			c.broken.Store(true)
		}
		return Result{}, classify(ctx, fmt.Sprintf("calling tool %q", name), err)
	}
	var r Result
	var texts []string
	for _, blk := range res.Content {
		if t, ok := blk.(*sdk.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	r.Text = strings.Join(texts, "\n")
	content := res.Content
	if content == nil {
		content = []sdk.Content{}
	}
	if r.Content, err = json.Marshal(content); err != nil {
		return Result{}, tool.Errorf(tool.CodeInternal, "encoding the result of tool %q: %v", name, err)
	}
	if res.StructuredContent != nil {
		if r.Structured, err = json.Marshal(res.StructuredContent); err != nil {
			return Result{}, tool.Errorf(tool.CodeInternal, "encoding the structured result of tool %q: %v", name, err)
		}
	}
	if res.IsError {
		msg := r.Text
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		code := tool.CodeToolFailed
		if lower := strings.ToLower(msg); strings.Contains(lower, "access denied") || strings.Contains(lower, "eacces") || strings.Contains(lower, "eperm") {
			// "access denied": the server's own refusal; EACCES and EPERM: the kernel's, in
			// a sandboxed server (Node reports "EACCES: permission denied, open ...").
			code = tool.CodePermissionDenied
		}
		return r, tool.Errorf(code, "tool %q: %s", name, msg)
	}
	return r, nil
}

// connectionLost reports whether a call failed because the session's connection is gone:
// closed, or its stream ended (a stdio server's process exited mid-call).
func connectionLost(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// classify maps an SDK failure to a structured tool error (§18.3).
func classify(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return tool.Errorf(tool.CodeToolTimeout, "%s: %v", what, err)
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return tool.Errorf(tool.CodeCancelled, "%s: cancelled", what)
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		switch we.Code {
		case jsonrpc.CodeInvalidParams:
			return tool.Errorf(tool.CodeValidation, "%s: the server refused it: %s", what, we.Message)
		case jsonrpc.CodeMethodNotFound:
			return tool.Errorf(tool.CodeNotFound, "%s: the server does not offer it: %s", what, we.Message)
		}
	}
	return tool.Errorf(tool.CodeInternal, "%s: %v", what, err)
}
