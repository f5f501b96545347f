// Package tool is the Go SDK of tool calls (§18): an agent lists tools, calls one and gets its
// result, streams a call's frames — resuming after a dropped connection from the last frame it
// saw — and cancels a call. It speaks the canonical ToolService and ConnectorService plus the
// metadata documented in docs/tools.md ("RPCs"); failures come back as *Error with the §18.3
// error_code.
package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	ptool "github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// Error is a call that failed, was refused or was cancelled: its §18.3 error_code (e.g.
// "TOOL_TIMEOUT", "PERMISSION_DENIED") and message.
type Error struct {
	// CallID is the call's id.
	CallID string
	// Code is the error_code.
	Code string
	// Message says what went wrong.
	Message string
}

// Error renders "<CODE>: <message>".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// CodeOf returns the error_code of an *Error in err, or "" when err is none.
func CodeOf(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

// Summary is the JSON summary of a call's final frame: how the call ended and how much output
// came before the end.
type Summary = ptool.Summary

// SummaryOf decodes a final frame's summary.
func SummaryOf(f *toolpb.ToolFrame) (Summary, error) {
	var s Summary
	err := json.Unmarshal(f.GetSummary(), &s)
	return s, err
}

// Client calls tools for one agent.
type Client struct {
	agent string
	svc   toolpb.ToolServiceClient
	conn  connectorpb.ConnectorServiceClient
}

// New returns the tool client of a dialled agent: its calls run in the agent's worktree.
func New(a *sdk.Agent) *Client { return NewFor(a.ClientConn(), a.ID()) }

// NewFor returns a tool client over conn for agent (an operator calling for an agent, or any
// caller when the server's authentication is off).
func NewFor(conn grpc.ClientConnInterface, agent string) *Client {
	return &Client{agent: agent, svc: toolpb.NewToolServiceClient(conn), conn: connectorpb.NewConnectorServiceClient(conn)}
}

// Call is one tool call to make.
type Call struct {
	// CallID names the call; empty makes one (a UUID), so that Call can retry safely.
	CallID string
	// ProviderID and ToolName name the tool, e.g. "builtin" and "fs.read".
	ProviderID, ToolName string
	// Args are the arguments, encoded as JSON (nil: {}).
	Args any
	// Policy is the execution policy (§18.5); nil takes the defaults.
	Policy *toolpb.ExecutionPolicy
}

func (c *Client) proto(call Call) (*toolpb.ToolCall, error) {
	args := []byte("{}")
	if call.Args != nil {
		var err error
		if raw, ok := call.Args.(json.RawMessage); ok {
			args = raw
		} else if args, err = json.Marshal(call.Args); err != nil {
			return nil, fmt.Errorf("encoding the arguments of %s: %w", call.ToolName, err)
		}
	}
	id := call.CallID
	if id == "" {
		id = "tool-" + uuid.NewString()
	}
	return &toolpb.ToolCall{CallId: id, ProviderId: call.ProviderID, ToolName: call.ToolName, ContentType: "application/json", Args: args, Policy: call.Policy}, nil
}

func (c *Client) ctx(ctx context.Context) context.Context {
	if c.agent == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, wire.AgentIDKey, c.agent)
}

// Tools lists a provider's tools (ConnectorService.DescribeTools).
func (c *Client) Tools(ctx context.Context, providerID string) ([]*connectorpb.ToolDescriptor, error) {
	resp, err := c.conn.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: providerID})
	if err != nil {
		return nil, err
	}
	return resp.GetTools(), nil
}

// Do makes the call and returns its final frame; a call that failed is an *Error. A call
// whose answer was lost (the connection dropped) is asked again with the same call_id,
// which joins the call rather than running the tool again.
func (c *Client) Do(ctx context.Context, call Call) (*toolpb.ToolFrame, error) {
	req, err := c.proto(call)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		var trailer metadata.MD
		f, err := c.svc.Call(c.ctx(ctx), req, grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || attempt > MaxResumes || ctx.Err() != nil {
			return f, asError(req.GetCallId(), err, trailer)
		}
		// The answer was lost or the server was away: ask again with the same call_id.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// JSON makes the call and decodes its result into out.
func (c *Client) JSON(ctx context.Context, call Call, out any) error {
	f, err := c.Do(ctx, call)
	if err != nil {
		return err
	}
	return json.Unmarshal(f.GetData(), out)
}

// Cancel cancels a call (§18.6) and returns the answer's code: "CANCELLED",
// "ALREADY_COMPLETED" or "NOT_FOUND".
func (c *Client) Cancel(ctx context.Context, callID string) (string, error) {
	te, err := c.svc.Cancel(c.ctx(ctx), &toolpb.ToolCall{CallId: callID})
	if err != nil {
		return "", err
	}
	return te.GetErrorCode(), nil
}

// Stream is a call's frames as they come.
type Stream struct {
	c      *Client
	ctx    context.Context
	req    *toolpb.ToolCall
	st     grpc.ServerStreamingClient[toolpb.ToolFrame]
	last   uint64
	done   bool
	resume int
}

// MaxResumes bounds how many times a Stream reconnects after its connection dropped.
const MaxResumes = 20

// Stream starts the call and returns its frames as they are stored (CallStream). The stream
// reconnects by itself when the connection drops, resuming after the last frame it returned.
func (c *Client) Stream(ctx context.Context, call Call) (*Stream, error) {
	req, err := c.proto(call)
	if err != nil {
		return nil, err
	}
	s := &Stream{c: c, ctx: ctx, req: req}
	s.st, err = c.svc.CallStream(c.ctx(ctx), req)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Resume continues a call already made after frame afterFrame (0: from the start).
func (c *Client) Resume(ctx context.Context, callID string, afterFrame uint64) (*Stream, error) {
	s := &Stream{c: c, ctx: ctx, req: &toolpb.ToolCall{CallId: callID}, last: afterFrame}
	return s, s.reopen()
}

// CallID is the stream's call.
func (s *Stream) CallID() string { return s.req.GetCallId() }

// Last is the frame_no of the last frame returned.
func (s *Stream) Last() uint64 { return s.last }

func (s *Stream) reopen() error {
	ctx := metadata.AppendToOutgoingContext(s.c.ctx(s.ctx), wire.ResumeAfterKey, strconv.FormatUint(s.last, 10))
	st, err := s.c.svc.CallStream(ctx, &toolpb.ToolCall{CallId: s.req.GetCallId()})
	if err != nil {
		return err
	}
	s.st = st
	return nil
}

// Recv returns the next frame; io.EOF after the final frame. A refused call is an *Error.
func (s *Stream) Recv() (*toolpb.ToolFrame, error) {
	for {
		if s.done {
			return nil, io.EOF
		}
		f, err := s.st.Recv()
		if err == nil && f.GetFrameNo() == 0 {
			// A keep-alive the server sends a silent stream over HTTP/1.1: no frame.
			continue
		}
		if err == nil {
			s.last = f.GetFrameNo()
			s.done = f.GetFinal()
			return f, nil
		}
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		if c := status.Code(err); (c == codes.Unavailable || c == codes.Internal) && s.ctx.Err() == nil && s.resume < MaxResumes {
			// The connection dropped: resume after the last frame seen.
			s.resume++
			select {
			case <-s.ctx.Done():
				return nil, s.ctx.Err()
			case <-time.After(time.Duration(s.resume) * 100 * time.Millisecond):
			}
			if rerr := s.reopen(); rerr == nil {
				continue
			}
		}
		return nil, asError(s.req.GetCallId(), err, s.st.Trailer())
	}
}

// asError turns a refused or failed call's status into an *Error; other errors pass.
func asError(callID string, err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if te, ok := d.(*toolpb.ToolError); ok {
			return &Error{CallID: callID, Code: te.GetErrorCode(), Message: te.GetMessage()}
		}
	}
	if v := trailer.Get(wire.ToolErrorCodeTrailer); len(v) > 0 {
		return &Error{CallID: callID, Code: v[0], Message: st.Message()}
	}
	return err
}
