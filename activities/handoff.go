package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// The side effects of the handoff workflow (§17.6): choosing a target, offering it the
// handoff, telling the agents involved, recording transitions and fencing the originator.
// Each is idempotent: its NOTIFICATIONs carry message_ids derived from the request and a
// number the workflow chose, so a retried activity finds its message already admitted.

// Handoff events: the "event" of the JSON payload of a handoff NOTIFICATION.
const (
	// HandoffEventOffered offers the handoff to its target (payload HandoffOffered).
	HandoffEventOffered = "handoff_offered"
	// HandoffEventAccepted tells the originator the target accepted.
	HandoffEventAccepted = "handoff_accepted"
	// HandoffEventCompleted tells the originator the context now belongs to the target: it
	// must not continue work on the correlation (§17.6).
	HandoffEventCompleted = "handoff_completed"
	// HandoffEventRejected tells the originator the handoff ended REJECTED.
	HandoffEventRejected = "handoff_rejected"
	// HandoffEventExpired tells the originator (and a target holding the offer) the handoff
	// ended EXPIRED: timeout, or no capable agent left.
	HandoffEventExpired = "handoff_expired"
	// HandoffEventCancelled tells the target and the originator the handoff was cancelled
	// (CancelDelegation).
	HandoffEventCancelled = "handoff_cancelled"
)

// handoffMessages is the UUID namespace of handoff NOTIFICATION message_ids.
var handoffMessages = uuid.MustParse("8d0b6f0e-3f1c-4c5e-a4e2-6b1f7a2d9c43")

// HandoffMessageID is the message_id of the n-th message of a kind ("offer", "notify") a
// handoff sends: a UUIDv5 of request, kind and n, the same on every retry and replay, so the
// router admits it once (§11.3 allows a sender to repeat a message_id only for the same
// message).
func HandoffMessageID(requestID, kind string, n int) string {
	return uuid.NewSHA1(handoffMessages, []byte(requestID+"/"+kind+"/"+strconv.Itoa(n))).String()
}

// RouteHandoffInput asks RouteHandoff for a target.
type RouteHandoffInput struct {
	// RequestID and Correlation name the handoff; fences are looked up on Correlation.
	RequestID, Correlation string
	// Capabilities are the capabilities_required; a REDIRECT's target (Only) must declare
	// them too.
	Capabilities []string `json:",omitempty"`
	// ContentType is the context snapshot's content type; the target must accept it.
	ContentType string
	// Exclude are agents never chosen: the originator and the agents that refused.
	Exclude []string `json:",omitempty"`
	// Only, when set, checks this one agent (a REDIRECT's redirect_to_agent_id) instead of
	// ranking them all: it must be registered, not excluded, declare every one of
	// Capabilities, accept the content type and not be fenced on the correlation — what a
	// named to_agent must satisfy.
	Only string `json:",omitempty"`
}

// HandoffRoute is RouteHandoff's answer.
type HandoffRoute struct {
	// Agent is the chosen target; empty when there is none.
	Agent string
	// Reason says why Agent was chosen, or why none was.
	Reason string
}

// RouteHandoff chooses the target of a routed handoff (§17.6: capability-based routing when
// to_agent is empty): among the registered agents, protocol.RankCandidates keeps the RUNNABLE
// ones with every required capability, accepting the context's content type and under their
// max_concurrent_delegations (the store's open-delegation counts), not excluded; of those it
// drops the agents fenced on the correlation (a ping-pong back to an agent that handed the
// context away) and ranks the rest by load (messages waiting in their buffers plus open
// delegations).
func (a *Activities) RouteHandoff(ctx context.Context, in RouteHandoffInput) (HandoffRoute, error) {
	recs, err := a.Store.Registry().ListAgents(ctx)
	if err != nil {
		return HandoffRoute{}, fmt.Errorf("list agents: %w", err)
	}
	if in.Only != "" {
		return a.checkRedirect(ctx, in, recs)
	}
	open, err := a.Store.Handoffs().OpenDelegations(ctx)
	if err != nil {
		return HandoffRoute{}, fmt.Errorf("count open delegations: %w", err)
	}
	exclude := make(map[string]bool, len(in.Exclude))
	for _, id := range in.Exclude {
		exclude[id] = true
	}
	cands := make([]protocol.HandoffCandidate, 0, len(recs))
	for _, rec := range recs {
		d := rec.Descriptor
		cands = append(cands, protocol.HandoffCandidate{AgentID: d.GetAgentId(), State: rec.State, Capabilities: d.GetCapabilities(),
			Modalities: d.GetModalitiesSupported(), MaxConcurrentDelegations: d.GetMaxConcurrentDelegations(), OpenDelegations: open[d.GetAgentId()]})
	}
	capable, reason := protocol.RankCandidates(cands, in.Capabilities, in.ContentType, exclude)
	if len(capable) == 0 {
		return HandoffRoute{Reason: reason}, nil
	}
	// Fences and loads cost a read per agent: only the capable ones are looked at.
	var fenced []string
	loaded := make([]protocol.HandoffCandidate, 0, len(capable))
	for _, c := range capable {
		if _, ok, err := a.Store.Handoffs().Fenced(ctx, in.Correlation, c.AgentID); err != nil {
			return HandoffRoute{}, fmt.Errorf("look up fence of %s: %w", c.AgentID, err)
		} else if ok {
			fenced = append(fenced, c.AgentID)
			continue
		}
		depth, err := a.Store.Messages().Depth(ctx, c.AgentID)
		if err != nil {
			return HandoffRoute{}, fmt.Errorf("load of %s: %w", c.AgentID, err)
		}
		c.Load = depth
		loaded = append(loaded, c)
	}
	if len(loaded) == 0 {
		return HandoffRoute{Reason: fmt.Sprintf("no capable agent left: the %d capable (%s) are fenced on correlation %s (§17.6)",
			len(fenced), strings.Join(fenced, ", "), in.Correlation)}, nil
	}
	ranked, reason := protocol.RankCandidates(loaded, nil, in.ContentType, nil)
	return HandoffRoute{Agent: ranked[0].AgentID, Reason: reason}, nil
}

// checkRedirect is RouteHandoff for a REDIRECT: the one agent named, if it qualifies. An
// agent without the capabilities_required is not offered the work (§17.6: capabilities the
// receiving agent MUST possess), however sure the redirecting agent is.
func (a *Activities) checkRedirect(ctx context.Context, in RouteHandoffInput, recs []store.AgentRecord) (HandoffRoute, error) {
	i := slices.IndexFunc(recs, func(r store.AgentRecord) bool { return r.Descriptor.GetAgentId() == in.Only })
	var missing []string
	if i >= 0 {
		missing = protocol.MissingCapabilities(recs[i].Descriptor.GetCapabilities(), in.Capabilities)
	}
	switch {
	case slices.Contains(in.Exclude, in.Only):
		return HandoffRoute{Reason: fmt.Sprintf("redirect to %s refused: it is the originator or already refused", in.Only)}, nil
	case i < 0:
		return HandoffRoute{Reason: fmt.Sprintf("redirect to %s refused: not registered", in.Only)}, nil
	case len(missing) > 0:
		return HandoffRoute{Reason: fmt.Sprintf("redirect to %s refused: it lacks capabilities_required %v (§17.6)", in.Only, missing)}, nil
	case !protocol.AcceptsContentType(recs[i].Descriptor.GetModalitiesSupported(), in.ContentType):
		return HandoffRoute{Reason: fmt.Sprintf("redirect to %s refused: it does not accept %s (004 item 8)", in.Only, in.ContentType)}, nil
	}
	f, ok, err := a.Store.Handoffs().Fenced(ctx, in.Correlation, in.Only)
	if err != nil {
		return HandoffRoute{}, fmt.Errorf("look up fence of %s: %w", in.Only, err)
	}
	if ok {
		return HandoffRoute{Reason: fmt.Sprintf("redirect to %s refused: fenced on correlation %s since handoff %s (§17.6)", in.Only, in.Correlation, f.RequestID)}, nil
	}
	return HandoffRoute{Agent: in.Only, Reason: "redirect"}, nil
}

// OfferHandoffInput asks OfferHandoff to offer a handoff to a target.
type OfferHandoffInput struct {
	// RequestID, Correlation and From name the handoff and its originator.
	RequestID, Correlation, From string
	// Target is the agent offered the handoff.
	Target string
	// Reason is the originator's reason for the handoff.
	Reason string
	// ChoiceReason says why Target was chosen (audited).
	ChoiceReason string
	// Capabilities are the capabilities_required.
	Capabilities []string `json:",omitempty"`
	// Priority is the handoff's priority (§7.1).
	Priority int32
	// ContextContentType and ContextSize describe the snapshot, which the target fetches
	// with GetPendingHandoffs.
	ContextContentType string
	ContextSize        int
	// ExpiresAt is when the offer lapses (the request's time plus its timeout).
	ExpiresAt time.Time
	// Offer numbers this offer from 1; its message_id derives from it.
	Offer int
}

// HandoffOffered is the JSON payload of the NOTIFICATION that offers a handoff to its target
// (correlation_id = the handoff's correlation). The context itself is not in it: the target
// reads it with GetPendingHandoffs.
type HandoffOffered struct {
	// Event is HandoffEventOffered.
	Event string `json:"event"`
	// RequestID names the handoff; AcceptHandoff and RejectHandoff take it.
	RequestID string `json:"request_id"`
	// FromAgent is the originator.
	FromAgent string `json:"from_agent"`
	// Reason is the originator's reason.
	Reason string `json:"reason,omitempty"`
	// CapabilitiesRequired are the capabilities asked for.
	CapabilitiesRequired []string `json:"capabilities_required,omitempty"`
	// Priority is the handoff's priority.
	Priority int32 `json:"priority"`
	// ContextContentType is the snapshot's content type (004 item 8).
	ContextContentType string `json:"context_content_type"`
	// ContextBytes is the snapshot's size.
	ContextBytes int `json:"context_bytes"`
	// ExpiresAt is when the offer lapses, RFC 3339.
	ExpiresAt time.Time `json:"expires_at"`
}

// OfferHandoff records the offer in the store's projection (PENDING, target), so that
// GetPendingHandoffs lists it for the target, and sends the target a NOTIFICATION through the
// router (§17.6: "the offer reaches the target through the router and GetPendingHandoffs").
// A retry re-sends the same message_id, which the router admits once.
func (a *Activities) OfferHandoff(ctx context.Context, in OfferHandoffInput) error {
	if err := a.updateHandoff(ctx, in.RequestID, handoffpb.HandoffStatus_PENDING, in.Target, "", ""); err != nil {
		return err
	}
	payload, err := json.Marshal(HandoffOffered{Event: HandoffEventOffered, RequestID: in.RequestID, FromAgent: in.From, Reason: in.Reason,
		CapabilitiesRequired: in.Capabilities, Priority: in.Priority, ContextContentType: in.ContextContentType, ContextBytes: in.ContextSize,
		ExpiresAt: in.ExpiresAt.UTC()})
	if err != nil {
		return fmt.Errorf("encode handoff offer: %w", err)
	}
	id := HandoffMessageID(in.RequestID, "offer", in.Offer)
	if err := a.notifyOnce(ctx, in.Target, id, in.Correlation, payload); err != nil {
		return err
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.Correlation, Actor: protocol.SchedulerID, Type: "handoff.offered", AgentID: in.Target, MessageID: id,
		Details: map[string]any{"request_id": in.RequestID, "from": in.From, "offer": in.Offer, "why": in.ChoiceReason}})
	return nil
}

// NotifyHandoffInput asks NotifyHandoff to tell one agent about a handoff.
type NotifyHandoffInput struct {
	// RequestID and Correlation name the handoff.
	RequestID, Correlation string
	// To is the agent told.
	To string
	// Event is one of the HandoffEvent* constants.
	Event string
	// N numbers the handoff's notifications from 1; the message_id derives from it.
	N int
	// From, Target and AcceptedBy are the handoff's agents.
	From, Target, AcceptedBy string `json:",omitempty"`
	// State is the handoff's state.
	State handoffpb.HandoffStatus
	// Reason explains the event (rejection, expiry, cancellation).
	Reason string `json:",omitempty"`
	// Code is the error_code a handoff that ended REJECTED returns to the originator:
	// REDIRECT for a redirect not followed, VALIDATION_ERROR for a redirect loop or a blank
	// redirect target; unset otherwise.
	Code commonpb.ErrorCode `json:",omitempty"`
	// RedirectTo is the agent a REDIRECT not followed named, for the originator to ask.
	RedirectTo string `json:",omitempty"`
	// CompleteBy is an accepted handoff's completion deadline; zero when it has none.
	CompleteBy time.Time `json:",omitzero"`
	// GracePeriod is a cancellation's grace period.
	GracePeriod time.Duration `json:",omitempty"`
}

// HandoffEvent is the JSON payload of the NOTIFICATIONs that tell agents how a handoff went
// (correlation_id = the handoff's correlation).
type HandoffEvent struct {
	// Event is one of the HandoffEvent* constants.
	Event string `json:"event"`
	// RequestID names the handoff.
	RequestID string `json:"request_id"`
	// State is the handoff's state, e.g. "ACCEPTED".
	State string `json:"state"`
	// FromAgent is the originator.
	FromAgent string `json:"from_agent"`
	// ToAgent is the agent the handoff was last offered to.
	ToAgent string `json:"to_agent,omitempty"`
	// AcceptedBy is the agent that accepted it.
	AcceptedBy string `json:"accepted_by,omitempty"`
	// Reason explains a rejection, expiry or cancellation.
	Reason string `json:"reason,omitempty"`
	// RejectionCode is the error_code's name a REJECTED handoff returns to its originator,
	// as HandoffResponse.rejection_code would carry it: "REDIRECT" when a redirect was not
	// followed, "VALIDATION_ERROR" for a redirect loop or a blank redirect target.
	RejectionCode string `json:"rejection_code,omitempty"`
	// RedirectToAgentID is the agent a REDIRECT not followed named, as
	// HandoffResponse.redirect_to_agent_id would carry it: the originator may ask it itself.
	RedirectToAgentID string `json:"redirect_to_agent_id,omitempty"`
	// CompleteBy is when an accepted handoff expires unless completed, RFC 3339: the
	// originator hears back by then at the latest.
	CompleteBy string `json:"complete_by,omitempty"`
	// GracePeriodMs is a cancellation's grace period: the target stops within it.
	GracePeriodMs int64 `json:"grace_period_ms,omitempty"`
}

// NotifyHandoff sends one agent a NOTIFICATION about a handoff (HandoffEvent). A retry
// re-sends the same message_id, which the router admits once.
func (a *Activities) NotifyHandoff(ctx context.Context, in NotifyHandoffInput) error {
	ev := HandoffEvent{Event: in.Event, RequestID: in.RequestID, State: in.State.String(), FromAgent: in.From,
		ToAgent: in.Target, AcceptedBy: in.AcceptedBy, Reason: in.Reason, RedirectToAgentID: in.RedirectTo, GracePeriodMs: in.GracePeriod.Milliseconds()}
	if in.Code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		ev.RejectionCode = in.Code.String()
	}
	if !in.CompleteBy.IsZero() {
		ev.CompleteBy = in.CompleteBy.UTC().Format(time.RFC3339Nano)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode handoff event: %w", err)
	}
	return a.notifyOnce(ctx, in.To, HandoffMessageID(in.RequestID, "notify", in.N), in.Correlation, payload)
}

// notifyOnce delivers a NOTIFICATION through the router; a message_id already admitted is a
// retry of a delivery that succeeded.
func (a *Activities) notifyOnce(ctx context.Context, to, messageID, correlation string, payload []byte) error {
	env := &commonpb.Envelope{
		MessageId: messageID, CorrelationId: correlation, MessageType: commonpb.MessageType_NOTIFICATION,
		ContentType: "application/json", ContentLength: uint64(len(payload)), Payload: payload,
	}
	if err := a.Router.Notify(ctx, to, env); err != nil && !errors.Is(err, store.ErrDuplicateMessage) {
		return fmt.Errorf("notify %s: %w", to, err)
	}
	return nil
}

// RecordHandoffInput asks RecordHandoff to record a transition.
type RecordHandoffInput struct {
	// RequestID, Correlation and From name the handoff.
	RequestID, Correlation, From string
	// Status is the new state.
	Status handoffpb.HandoffStatus
	// Target, AcceptedBy and EndReason are stored with it (empty keeps the stored value).
	Target, AcceptedBy, EndReason string `json:",omitempty"`
	// Note explains the transition in the audit log (e.g. a rejection and what follows).
	Note string `json:",omitempty"`
}

// RecordHandoff writes a transition to the store's projection and the audit log as event
// "handoff.<state>" (§19: every transition is audited). A handoff without a projection (its
// record was purged) is still audited.
func (a *Activities) RecordHandoff(ctx context.Context, in RecordHandoffInput) error {
	if err := a.updateHandoff(ctx, in.RequestID, in.Status, in.Target, in.AcceptedBy, in.EndReason); err != nil {
		return err
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.Correlation, Actor: protocol.SchedulerID, Type: "handoff." + strings.ToLower(in.Status.String()),
		AgentID: in.From, Details: map[string]any{"request_id": in.RequestID, "target": in.Target, "accepted_by": in.AcceptedBy,
			"end_reason": in.EndReason, "note": in.Note}})
	return nil
}

// updateHandoff updates the projection; a missing record is not an error, nothing reads it.
func (a *Activities) updateHandoff(ctx context.Context, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) error {
	err := a.Store.Handoffs().UpdateHandoff(ctx, requestID, status, target, acceptedBy, endReason)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("record handoff %s %s: %w", requestID, status, err)
	}
	return nil
}

// FenceHandoffInput asks FenceHandoff to fence an originator.
type FenceHandoffInput struct {
	// Correlation is the correlation handed over.
	Correlation string
	// AgentID is the originator, fenced from now on.
	AgentID string
	// RequestID is the completed handoff.
	RequestID string
	// NewOwner is the agent that owns the context now.
	NewOwner string
}

// FenceHandoff records that the originator handed the correlation's context to NewOwner: the
// router refuses its further messages on the correlation (§17.6: the originator MUST NOT
// continue work on the transferred context). Fencing twice changes nothing.
func (a *Activities) FenceHandoff(ctx context.Context, in FenceHandoffInput) error {
	f := store.Fence{Correlation: in.Correlation, AgentID: in.AgentID, RequestID: in.RequestID, NewOwner: in.NewOwner, At: time.Now().UTC()}
	if err := a.Store.Handoffs().Fence(ctx, f); err != nil {
		return fmt.Errorf("fence %s on %s: %w", in.AgentID, in.Correlation, err)
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.Correlation, Actor: protocol.SchedulerID, Type: "handoff.fenced", AgentID: in.AgentID,
		Details: map[string]any{"request_id": in.RequestID, "new_owner": in.NewOwner}})
	return nil
}
