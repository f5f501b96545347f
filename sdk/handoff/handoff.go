// Package handoff is the Go SDK of the agent handoff protocol (§17.6): an originator
// requests a handoff and watches it move; a target watches for offers, accepts or rejects
// them (OVERLOADED with a retry hint, REDIRECT to another agent) and completes what it
// accepted; every agent lists the offers waiting for it after a restart. It speaks the
// canonical HandoffService plus the metadata documented in docs/handoff.md.
package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// Events a handoff's workflow sends as NOTIFICATIONs, in the payload's "event" field.
const (
	// EventOffered reaches the target: a handoff waits for its answer.
	EventOffered = "handoff_offered"
	// EventAccepted reaches the originator: the target accepted.
	EventAccepted = "handoff_accepted"
	// EventCompleted reaches the originator: the target completed; the originator is fenced
	// on the correlation from now on.
	EventCompleted = "handoff_completed"
)

// DefaultTimeout is a Request's wait for acceptance when it sets none.
const DefaultTimeout = 5 * time.Minute

// Client makes an agent's handoff calls over its connection (signed when the agent signs).
type Client struct {
	agent *sdk.Agent
	svc   handoffpb.HandoffServiceClient
}

// New returns the handoff client of a dialled agent.
func New(a *sdk.Agent) *Client {
	return &Client{agent: a, svc: handoffpb.NewHandoffServiceClient(a.ClientConn())}
}

// Request is a handoff to request (§17.6).
type Request struct {
	// ID is the request_id; it names the handoff for good: a second Request with it learns
	// the first's state and starts nothing. Required.
	ID string
	// To is the target; empty routes by Capabilities to the least-loaded capable agent.
	To string
	// Capabilities the target must have.
	Capabilities []string
	// Reason says why, for the target and the audit log.
	Reason string
	// Context is the snapshot the target continues from.
	Context []byte
	// Priority is −19..20.
	Priority int32
	// Timeout bounds the wait for acceptance; zero means DefaultTimeout.
	Timeout time.Duration
	// Budget is passed down the delegation chain; nil means none.
	Budget *handoffpb.BudgetEnvelope
	// Policy says how overloaded targets, redirects and spillover are handled; nil means the
	// server's defaults.
	Policy *handoffpb.SwarmDelegationPolicy
}

// RequestOption tunes Request.
type RequestOption func(*requestOptions)

type requestOptions struct{ correlation, contentType string }

// WithCorrelation names the correlation whose context is handed off (fencing and
// CancelDelegation act on it); without it the request_id is the correlation.
func WithCorrelation(id string) RequestOption {
	return func(o *requestOptions) { o.correlation = id }
}

// WithContentType sets the snapshot's content type: application/json (the default),
// application/protobuf or text/plain (004 item 8). The target must accept it.
func WithContentType(ct string) RequestOption {
	return func(o *requestOptions) { o.contentType = ct }
}

// Ticket is what Request returns.
type Ticket struct {
	// RequestID names the handoff (workflow handoff/<request_id>).
	RequestID string
	// Correlation is the correlation it transfers.
	Correlation string
	// State is the handoff's state: PENDING for a new one, the existing one's for a reuse.
	State handoffpb.HandoffStatus
}

// Request asks for a handoff as the client's agent. Refusals are gRPC errors whose message
// starts with the spec's error_code (validation_error, no_route, permission_denied: ...).
func (c *Client) Request(ctx context.Context, r Request, opts ...RequestOption) (Ticket, error) {
	var o requestOptions
	for _, f := range opts {
		f(&o)
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	req := &handoffpb.HandoffRequest{RequestId: r.ID, FromAgent: c.agent.ID(), ToAgent: r.To, Reason: r.Reason,
		ContextSnapshot: r.Context, CapabilitiesRequired: r.Capabilities, Priority: r.Priority,
		Timeout: durationpb.New(timeout), Budget: r.Budget, DelegationPolicy: r.Policy}
	if o.correlation != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.CorrelationIDKey, o.correlation)
	}
	if o.contentType != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.ContextContentTypeKey, o.contentType)
	}
	var header metadata.MD
	if _, err := c.svc.RequestHandoff(ctx, req, grpc.Header(&header)); err != nil {
		return Ticket{}, fmt.Errorf("sw4rm: request handoff %s: %w", r.ID, err)
	}
	t := Ticket{RequestID: r.ID, Correlation: o.correlation, State: stateOf(header)}
	if t.Correlation == "" {
		t.Correlation = r.ID
	}
	return t, nil
}

// stateOf reads the state header.
func stateOf(md metadata.MD) handoffpb.HandoffStatus {
	if v := md.Get(wire.HandoffStateHeader); len(v) > 0 {
		return handoffpb.HandoffStatus(handoffpb.HandoffStatus_value[v[0]])
	}
	return handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED
}

// Accept takes the handoff offered to the client's agent and returns its new state
// (ACCEPTED). A handoff not offered to it (any more) is refused with FailedPrecondition.
func (c *Client) Accept(ctx context.Context, requestID string) (handoffpb.HandoffStatus, error) {
	var header metadata.MD
	_, err := c.svc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: requestID, Accepted: true, AcceptingAgent: c.agent.ID()}, grpc.Header(&header))
	if err != nil {
		return 0, fmt.Errorf("sw4rm: accept handoff %s: %w", requestID, err)
	}
	return stateOf(header), nil
}

// Rejection is how a target declines; build it with Decline, Overloaded or Redirect.
type Rejection struct {
	// Reason says why, for the originator.
	Reason string
	// Code is the rejection_code: OVERLOADED, REDIRECT, or anything else for a plain refusal.
	Code commonpb.ErrorCode
	// RetryAfter is the OVERLOADED hint: offer it again no sooner than this.
	RetryAfter time.Duration
	// RedirectTo is the REDIRECT target.
	RedirectTo string
}

// Decline is a plain refusal: the handoff goes to the next capable agent, or ends REJECTED.
func Decline(reason string) Rejection { return Rejection{Reason: reason} }

// Overloaded says the target is busy: the workflow offers the handoff again after a backoff
// of at least retryAfter, within the request's SwarmDelegationPolicy.
func Overloaded(reason string, retryAfter time.Duration) Rejection {
	return Rejection{Reason: reason, Code: commonpb.ErrorCode_OVERLOADED, RetryAfter: retryAfter}
}

// Redirect points the handoff at another agent, which is offered it next.
func Redirect(to, reason string) Rejection {
	return Rejection{Reason: reason, Code: commonpb.ErrorCode_REDIRECT, RedirectTo: to}
}

// Reject declines the handoff offered to the client's agent and returns its new state.
func (c *Client) Reject(ctx context.Context, requestID string, r Rejection) (handoffpb.HandoffStatus, error) {
	var header metadata.MD
	_, err := c.svc.RejectHandoff(ctx, &handoffpb.HandoffResponse{RequestId: requestID, AcceptingAgent: c.agent.ID(),
		RejectionReason: r.Reason, RejectionCode: r.Code, RetryAfterMs: uint64(r.RetryAfter.Milliseconds()), RedirectToAgentId: r.RedirectTo},
		grpc.Header(&header))
	if err != nil {
		return 0, fmt.Errorf("sw4rm: reject handoff %s: %w", requestID, err)
	}
	return stateOf(header), nil
}

// Complete records that the client's agent, which accepted the handoff, took the context
// over: the handoff is COMPLETED and the originator is fenced on its correlation (§17.6).
func (c *Client) Complete(ctx context.Context, requestID string) (string, error) {
	resp, err := c.svc.CompleteHandoff(ctx, &handoffpb.CompleteHandoffRequest{RequestId: requestID, Status: handoffpb.HandoffStatus_COMPLETED})
	if err != nil {
		return "", fmt.Errorf("sw4rm: complete handoff %s: %w", requestID, err)
	}
	return resp.GetMessage(), nil
}

// Cancel cancels every open handoff the client's agent requested on a correlation, giving
// the targets grace to stop; it returns the server's account of what it cancelled.
func (c *Client) Cancel(ctx context.Context, correlation, reason string, grace time.Duration) (string, error) {
	resp, err := c.svc.CancelDelegation(ctx, &handoffpb.CancelDelegation{CorrelationId: correlation, Reason: reason, GracePeriodMs: uint64(grace.Milliseconds())})
	if err != nil {
		return "", fmt.Errorf("sw4rm: cancel delegation %s: %w", correlation, err)
	}
	return resp.GetMessage(), nil
}

// Pending is a handoff offered to the agent and waiting for its answer.
type Pending struct {
	// Request is the request as the originator sent it, with the context snapshot.
	Request *handoffpb.HandoffRequest
	// ContentType is the snapshot's content type.
	ContentType string
	// Correlation is the correlation handed off.
	Correlation string
}

// Pending lists the handoffs waiting for the client's agent (§17.6: call it after recovering
// from a failure; offers made while the agent was away are there).
func (c *Client) Pending(ctx context.Context) ([]Pending, error) {
	var header metadata.MD
	resp, err := c.svc.GetPendingHandoffs(ctx, &handoffpb.GetPendingHandoffsRequest{AgentId: c.agent.ID()}, grpc.Header(&header))
	if err != nil {
		return nil, fmt.Errorf("sw4rm: pending handoffs: %w", err)
	}
	cts, corrs := header.Get(wire.ContextContentTypeKey), header.Get(wire.CorrelationIDKey)
	out := make([]Pending, 0, len(resp.GetPendingRequests()))
	for i, r := range resp.GetPendingRequests() {
		p := Pending{Request: r, ContentType: "application/json", Correlation: r.GetRequestId()}
		if i < len(cts) && cts[i] != "" {
			p.ContentType = cts[i]
		}
		if i < len(corrs) && corrs[i] != "" {
			p.Correlation = corrs[i]
		}
		out = append(out, p)
	}
	return out, nil
}

// Fetch returns the pending handoff requestID with its context snapshot, which an offer's
// notification does not carry; ok is false when it is no longer pending for the agent.
func (c *Client) Fetch(ctx context.Context, requestID string) (p Pending, ok bool, err error) {
	all, err := c.Pending(ctx)
	if err != nil {
		return Pending{}, false, err
	}
	for _, p := range all {
		if p.Request.GetRequestId() == requestID {
			return p, true, nil
		}
	}
	return Pending{}, false, nil
}

// Offer is a handoff_offered event: a handoff waits for the agent's answer.
type Offer struct {
	// RequestID names the handoff.
	RequestID string `json:"request_id"`
	// From is the originator.
	From string `json:"from_agent"`
	// Reason is the originator's reason.
	Reason string `json:"reason"`
	// Capabilities are the capabilities asked for.
	Capabilities []string `json:"capabilities_required"`
	// Priority is the request's priority.
	Priority int32 `json:"priority"`
	// ContentType is the snapshot's content type; ContextBytes its size (Fetch returns it).
	ContentType  string `json:"context_content_type"`
	ContextBytes int    `json:"context_bytes"`
	// ExpiresAt is when the offer lapses unanswered.
	ExpiresAt time.Time `json:"-"`
}

// Event is one notification of a handoff's workflow.
type Event struct {
	// Kind is the payload's "event": EventOffered, EventAccepted, EventCompleted, or another
	// handoff_* event (the handoff rejected, expired or cancelled).
	Kind string
	// RequestID names the handoff.
	RequestID string
	// Correlation is the envelope's correlation_id.
	Correlation string
	// Offer is set for EventOffered.
	Offer *Offer
	// Fields are the payload's fields, for what the typed ones do not cover.
	Fields map[string]json.RawMessage
	// Envelope is the notification.
	Envelope *commonpb.Envelope
}

// String returns a field of the payload as a string ("" when absent or not a string).
func (e Event) String(field string) string {
	var s string
	_ = json.Unmarshal(e.Fields[field], &s)
	return s
}

// ParseEvent recognizes a handoff notification among an agent's deliveries: a NOTIFICATION
// whose JSON payload's "event" starts with "handoff_".
func ParseEvent(env *commonpb.Envelope) (Event, bool) {
	if env.GetMessageType() != commonpb.MessageType_NOTIFICATION || len(env.GetPayload()) == 0 {
		return Event{}, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(env.GetPayload(), &fields); err != nil {
		return Event{}, false
	}
	e := Event{Fields: fields, Correlation: env.GetCorrelationId(), Envelope: env}
	e.Kind = e.String("event")
	if !strings.HasPrefix(e.Kind, "handoff_") {
		return Event{}, false
	}
	e.RequestID = e.String("request_id")
	if e.Kind == EventOffered {
		var o Offer
		_ = json.Unmarshal(env.GetPayload(), &o)
		o.ExpiresAt = parseTime(fields["expires_at"])
		e.Offer = &o
	}
	return e, true
}

// parseTime reads an RFC 3339 string or Unix milliseconds.
func parseTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
		raw = json.RawMessage(s)
	}
	if ms, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// OnMessage adapts fn for sdk.ServeOptions.OnMessage: handoff events go to fn, every other
// delivery to next (nil drops them).
func OnMessage(fn func(context.Context, Event), next func(context.Context, *sdk.Delivery)) func(context.Context, *sdk.Delivery) {
	return func(ctx context.Context, d *sdk.Delivery) {
		if e, ok := ParseEvent(d.Envelope); ok {
			fn(ctx, e)
			return
		}
		if next != nil {
			next(ctx, d)
		}
	}
}

// Watch reads the agent's inbound stream until ctx ends, confirming every delivery and
// calling fn with each handoff event, in order: offers for a target, accepted, completed and
// the other outcomes for an originator. It is for agents that do nothing else with their
// stream; an agent that runs sdk.Agent.Serve uses OnMessage instead. It returns nil when ctx
// ends, or the stream's error.
func (c *Client) Watch(ctx context.Context, fn func(context.Context, Event)) error {
	s, err := c.agent.Receive(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		d, err := s.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := d.Confirm(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("sw4rm: confirm delivery %d: %w", d.Seq, err)
		}
		if e, ok := ParseEvent(d.Envelope); ok {
			fn(ctx, e)
		}
	}
}
