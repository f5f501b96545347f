package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// NegotiationEvent is one §17.1 event: its position and its JSON, built by the workflow.
type NegotiationEvent struct {
	// Seq is the event's position in the negotiation, from 1.
	Seq int
	// Kind is open, policy, propose, counter, evaluate, decide or abort.
	Kind string
	// JSON is the payload, sent byte for byte.
	JSON []byte
}

// NegotiationArtifact is one §17.4 record: kind and version name it (contract v3 is
// contract_v3.json, diff v2_to_v3 is diff_v2_to_v3.json; docs/negotiation.md).
type NegotiationArtifact struct {
	// Kind is policy, contract, diff, evaluation, decision, result or turn.
	Kind string
	// Version names the artifact within its kind.
	Version string
	// ContentType and Content are the artifact.
	ContentType string
	Content     []byte
}

// NegotiationPublishInput asks PublishNegotiation to store artifacts and deliver events.
type NegotiationPublishInput struct {
	// NegotiationID is the negotiation (and the events' correlation_id).
	NegotiationID string
	// Recipients receive every event, in order.
	Recipients []string
	// Events are delivered in order.
	Events []NegotiationEvent
	// Resent counts the first Events that another publication, which may still be running,
	// carries too: they are delivered (once — message_ids are idempotent) but audited by
	// that publication only.
	Resent int `json:",omitempty"`
	// Artifacts are stored (a stored one is left as it is).
	Artifacts []NegotiationArtifact
}

// negotiationMessages is the UUID namespace of negotiation event message_ids.
var negotiationMessages = uuid.MustParse("3c1e7f52-9a0d-4b7e-8f21-5d6c4a0b9e17")

// NegotiationMessageID is the message_id of event seq of a negotiation sent to an agent: a
// UUIDv5, the same on every retry and replay, so the router admits each once.
func NegotiationMessageID(negotiationID string, seq int, agent string) string {
	return uuid.NewSHA1(negotiationMessages, []byte(negotiationID+"/"+strconv.Itoa(seq)+"/"+agent)).String()
}

// PublishNegotiation stores the artifacts and sends every event to every recipient as a
// NEGOTIATION envelope with correlation_id = negotiation_id and the event's JSON as payload
// (§17.1), each recipient's in seq order. A retry repeats nothing: artifacts and message_ids
// are idempotent, and an event sent again (Resent, or a retry) is a duplicate the store
// reports without a write.
func (a *Activities) PublishNegotiation(ctx context.Context, in NegotiationPublishInput) error {
	// Artifacts are independent rows, written concurrently with the events. The events go in
	// one Router.NotifyAll, event by event and recipient by recipient within an event: one
	// admission batch, so one commit on PostgreSQL however many events and recipients there
	// are, where sending each recipient's events one after the other cost a commit per event
	// on the path of the last one (the decide a round waits for). NotifyAll keeps the order
	// of the announcements to one agent, which is the one order per stream §17.1 asks for.
	//
	// Except at the end: a participant told decide or abort reads the DecisionReport
	// (ListArtifacts) at once, and a stream on this frontend may get the event before a
	// concurrent artifact commit — so a batch ending the negotiation stores its artifacts
	// first. Rounds keep the concurrency: their events carry what they announce.
	g, gctx := errgroup.WithContext(ctx)
	if ends(in.Events) {
		if err := a.storeArtifacts(ctx, in); err != nil {
			return err
		}
	} else {
		g.Go(func() error { return a.storeArtifacts(gctx, in) })
	}
	if len(in.Events) > 0 && len(in.Recipients) > 0 {
		g.Go(func() error { return a.publishEvents(gctx, in) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, ev := range in.Events[min(max(in.Resent, 0), len(in.Events)):] {
		a.Sink.Record(ctx, audit.Event{CorrelationID: in.NegotiationID, Actor: protocol.SchedulerID, Type: "negotiation." + ev.Kind,
			Details: map[string]any{"seq": ev.Seq, "recipients": in.Recipients, "bytes": len(ev.JSON)}})
	}
	return nil
}

// ends reports whether events end the negotiation (a decide or an abort event).
func ends(events []NegotiationEvent) bool {
	for _, ev := range events {
		if ev.Kind == "decide" || ev.Kind == "abort" {
			return true
		}
	}
	return false
}

// storeArtifacts stores the batch's artifacts, concurrently; one already stored by an
// earlier attempt is not an error.
func (a *Activities) storeArtifacts(ctx context.Context, in NegotiationPublishInput) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, art := range in.Artifacts {
		g.Go(func() error {
			err := a.Store.Artifacts().AppendArtifact(gctx, store.Artifact{NegotiationID: in.NegotiationID, Kind: art.Kind, Version: art.Version,
				ContentType: art.ContentType, Content: art.Content})
			if err != nil && !errors.Is(err, store.ErrDuplicateArtifact) {
				return fmt.Errorf("store %s %s of negotiation %s: %w", art.Kind, art.Version, in.NegotiationID, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// publishEvents admits every event for every recipient in one Router.NotifyAll, in seq
// order for each recipient.
func (a *Activities) publishEvents(ctx context.Context, in NegotiationPublishInput) error {
	type sent struct {
		to string
		ev NegotiationEvent
	}
	notices := make([]router.Announcement, 0, len(in.Events)*len(in.Recipients))
	what := make([]sent, 0, cap(notices))
	for _, ev := range in.Events {
		for _, to := range in.Recipients {
			notices = append(notices, router.Announcement{AgentID: to, Envelope: negotiationEnvelope(in.NegotiationID, to, ev)})
			what = append(what, sent{to, ev})
		}
	}
	var failed error
	for i, err := range a.Router.NotifyAll(ctx, notices) {
		to, ev := what[i].to, what[i].ev
		switch {
		case err == nil, errors.Is(err, store.ErrDuplicateMessage):
			// Delivered now, or by an earlier attempt of this activity.
		case errors.Is(err, store.ErrNotFound):
			// A participant that deregistered mid-negotiation misses the rest; the others do
			// not wait for it.
			a.Sink.Record(ctx, audit.Event{CorrelationID: in.NegotiationID, Actor: protocol.SchedulerID, Type: "negotiation.undeliverable",
				AgentID: to, Details: map[string]any{"seq": ev.Seq, "kind": ev.Kind, "error": err.Error()}})
		default:
			// A retry sends the batch again, and what was admitted is then a duplicate. A
			// batch fails as a whole on a store error; a member fails alone only on its own
			// row (a duplicate, handled above), so a recipient does not get a later event
			// before an earlier one that failed.
			failed = cmp.Or(failed, fmt.Errorf("send %s event %d of negotiation %s to %s: %w", ev.Kind, ev.Seq, in.NegotiationID, to, err))
		}
	}
	return failed
}

// negotiationEnvelope is event ev of a negotiation as the NEGOTIATION envelope sent to an
// agent.
func negotiationEnvelope(negotiationID, to string, ev NegotiationEvent) *commonpb.Envelope {
	return &commonpb.Envelope{
		MessageId: NegotiationMessageID(negotiationID, ev.Seq, to), CorrelationId: negotiationID,
		MessageType: commonpb.MessageType_NEGOTIATION, ContentType: "application/json",
		ContentLength: uint64(len(ev.JSON)), Payload: ev.JSON, SequenceNumber: uint64(ev.Seq),
	}
}

// DebateEvaluationInput asks EvaluateNegotiationDrafts to compare two versions.
type DebateEvaluationInput struct {
	// NegotiationID, the two drafts and the intensity, as EvaluateDebate takes them.
	NegotiationID, ProposalA, ProposalB, Intensity string
}

// DebateEvaluation is the ReasoningProxy's answer.
type DebateEvaluation struct {
	// Confidence is in [0, 1]; Notes explain it.
	Confidence float64
	Notes      string
}

// EvaluateNegotiationDrafts asks the ReasoningProxy (built-in or external) for its
// confidence in the newer draft against the older one (§17.3, C.9).
func (a *Activities) EvaluateNegotiationDrafts(ctx context.Context, in DebateEvaluationInput) (DebateEvaluation, error) {
	resp, err := a.reasoningEngine().EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{NegotiationId: in.NegotiationID,
		ProposalA: in.ProposalA, ProposalB: in.ProposalB, Intensity: in.Intensity})
	if err != nil {
		return DebateEvaluation{}, fmt.Errorf("EvaluateDebate: %w", err)
	}
	c := resp.GetConfidenceScore()
	if !(c >= 0 && c <= 1) {
		return DebateEvaluation{}, fmt.Errorf("EvaluateDebate answered confidence %v outside [0, 1]", c)
	}
	return DebateEvaluation{Confidence: c, Notes: resp.GetNotes()}, nil
}

// SummarizeInput asks SummarizeTranscript for a summary of a debate transcript.
type SummarizeInput struct {
	// NegotiationID is the session.
	NegotiationID string
	// Turns are summarised in order.
	Turns []debate.Turn
	// MaxTokens bounds the summary.
	MaxTokens uint32
}

// SummarizeTranscript asks the ReasoningProxy's Summarize for a summary of the turns, so a
// long debate's later turns carry the summary instead of the whole transcript (ADR-011).
func (a *Activities) SummarizeTranscript(ctx context.Context, in SummarizeInput) (string, error) {
	req := &reasoningpb.SummarizeRequest{SessionId: in.NegotiationID, MaxTokens: in.MaxTokens, Mode: "debate"}
	for i, t := range in.Turns {
		req.Segments = append(req.Segments, &reasoningpb.TextSegment{Kind: "turn", Seq: int64(i + 1),
			Content: fmt.Sprintf("[round %d] %s: %s", t.Round, t.Agent, strings.TrimSpace(t.Text))})
	}
	resp, err := a.reasoningEngine().Summarize(ctx, req)
	if err != nil {
		return "", fmt.Errorf("summarize: %w", err)
	}
	return resp.GetSummary(), nil
}
