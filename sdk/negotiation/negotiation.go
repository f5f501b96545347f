// Package negotiation is the Go SDK of scheduler-run negotiations and debates (§17,
// ADR-011): open a negotiation with its options, propose, counter, evaluate, decide or
// abort, read the effective policy, decode the §17.1 events that reach the participants as
// NEGOTIATION envelopes, and answer debate turns. It speaks the canonical NegotiationService
// and SchedulerPolicyService plus the metadata documented in docs/negotiation.md.
package negotiation

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// WithIdempotencyKey returns ctx carrying key for the negotiation calls made with it. A call
// that got no answer (Unavailable, its own deadline) may have been applied; made again with
// the same key and the same request, it is answered with the first attempt's outcome instead
// of being applied a second time. Use a new key for every logical call.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	md := outgoing(ctx).Copy()
	md.Set(wire.IdempotencyKey, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// DebateTurnContentType is the content type of a debate turn task's params.
const DebateTurnContentType = "application/vnd.sw4rm.debate-turn+json"

// Client makes an agent's (or an operator connection's) negotiation calls.
type Client struct {
	agent  *sdk.Agent
	svc    negotiationpb.NegotiationServiceClient
	policy schedulerpb.SchedulerPolicyServiceClient
}

// New returns the negotiation client of a dialled agent.
func New(a *sdk.Agent) *Client {
	return &Client{agent: a, svc: negotiationpb.NewNegotiationServiceClient(a.ClientConn()), policy: schedulerpb.NewSchedulerPolicyServiceClient(a.ClientConn())}
}

// Options open a negotiation.
type Options struct {
	// ID is the negotiation_id (and its correlation_id).
	ID string
	// Topic and Participants (at least two registered agents) are required.
	Topic        string
	Participants []string
	// Intensity is LOWEST..HIGHEST; zero means MEDIUM.
	Intensity commonpb.DebateIntensity
	// Timeout is the debate_timeout; zero takes the intensity's default.
	Timeout time.Duration
	// Profile names a policy profile (§17.2).
	Profile string
	// Preferences are participants' preferences, clamped by the scheduler.
	Preferences map[string]*policypb.AgentPreferences
	// Schema is the JSON Schema drafts must satisfy; Examples the executable examples.
	Schema   json.RawMessage
	Examples []Example
	// Debate runs ADR-011's debate instead of propose/counter: Rounds 0 is the parallel vote.
	Debate   bool
	Rounds   int
	Strategy string
	// SummaryBytes is the transcript size past which turns carry a summary.
	SummaryBytes int
}

// Example is an executable example: an instance the draft (a JSON Schema) must accept
// (Valid) or reject.
type Example struct {
	Name     string          `json:"name"`
	Instance json.RawMessage `json:"instance"`
	Valid    bool            `json:"valid"`
}

// Open opens a negotiation with the caller as its opener.
func (c *Client) Open(ctx context.Context, o Options) error {
	in := o.Intensity
	if in == commonpb.DebateIntensity_DEBATE_INTENSITY_UNSPECIFIED {
		in = commonpb.DebateIntensity_MEDIUM
	}
	req := &negotiationpb.NegotiationOpen{NegotiationId: o.ID, CorrelationId: o.ID, Topic: o.Topic, Participants: o.Participants, Intensity: in}
	if o.Timeout > 0 {
		req.DebateTimeout = durationpb.New(o.Timeout)
	}
	// The opener receives the events; with SW4RM_AUTH=off this is how the server knows it.
	md := metadata.Pairs(wire.OpenerKey, c.agent.ID())
	if o.Profile != "" {
		md.Set(wire.PolicyProfileKey, o.Profile)
	}
	if len(o.Preferences) > 0 {
		m := map[string]json.RawMessage{}
		for agent, p := range o.Preferences {
			b, err := protojson.Marshal(p)
			if err != nil {
				return fmt.Errorf("encode preferences of %s: %w", agent, err)
			}
			m[agent] = b
		}
		b, _ := json.Marshal(m)
		md.Set(wire.AgentPreferencesKey, string(b))
	}
	if len(o.Schema) > 0 {
		md.Set(wire.NegotiationSchemaKey, metadataJSON(o.Schema))
	}
	if len(o.Examples) > 0 {
		b, err := json.Marshal(o.Examples)
		if err != nil {
			return fmt.Errorf("encode examples: %w", err)
		}
		md.Set(wire.NegotiationExamplesKey, metadataJSON(b))
	}
	if o.Debate {
		md.Set(wire.NegotiationModeKey, "debate")
		md.Set(wire.DebateRoundsKey, strconv.Itoa(o.Rounds))
		if o.Strategy != "" {
			md.Set(wire.DebateStrategyKey, o.Strategy)
		}
		if o.SummaryBytes > 0 {
			md.Set(wire.DebateSummaryBytesKey, strconv.Itoa(o.SummaryBytes))
		}
	}
	_, err := c.svc.Open(metadata.NewOutgoingContext(ctx, metadata.Join(outgoing(ctx), md)), req)
	return err
}

// metadataJSON writes JSON as a gRPC metadata value, which must be printable ASCII (gRPC
// refuses anything else before the call leaves): compacted, so that the newlines and tabs of
// a pretty-printed schema go, and with every non-ASCII character written as a \u escape,
// which JSON reads back as the same character (RFC 8259 §7). Outside strings valid JSON has
// only ASCII, so the escapes land inside strings. Text that is not JSON is sent as it is, for
// the server to refuse with its reasons.
func metadataJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	var out strings.Builder
	for _, r := range b.String() {
		switch {
		case r < utf8.RuneSelf:
			out.WriteRune(r)
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, hi, lo)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.String()
}

func outgoing(ctx context.Context) metadata.MD {
	md, _ := metadata.FromOutgoingContext(ctx)
	return md
}

// Propose submits the first draft as the calling agent.
func (c *Client) Propose(ctx context.Context, id, contentType string, payload []byte) error {
	_, err := c.svc.Propose(ctx, &negotiationpb.Proposal{NegotiationId: id, FromAgent: c.agent.ID(), ContentType: contentType, Payload: payload})
	return err
}

// Counter submits the next draft as the calling agent.
func (c *Client) Counter(ctx context.Context, id, contentType string, payload []byte) error {
	_, err := c.svc.Counter(ctx, &negotiationpb.CounterProposal{NegotiationId: id, FromAgent: c.agent.ID(), ContentType: contentType, Payload: payload})
	return err
}

// Evaluate records the calling agent's confidence in the current version.
func (c *Client) Evaluate(ctx context.Context, id string, confidence float64, notes string) error {
	_, err := c.svc.Evaluate(ctx, &negotiationpb.Evaluation{NegotiationId: id, FromAgent: c.agent.ID(), ConfidenceScore: confidence, Notes: notes})
	return err
}

// SubmitEvaluation records the calling agent's EvaluationReport; a refusal by the
// negotiation is returned as an error carrying the reason.
func (c *Client) SubmitEvaluation(ctx context.Context, id string, r *policypb.EvaluationReport) error {
	r.FromAgent = c.agent.ID()
	resp, err := c.policy.SubmitEvaluation(ctx, &schedulerpb.SubmitEvaluationRequest{NegotiationId: id, Report: r})
	if err != nil {
		return err
	}
	if !resp.GetAccepted() {
		return errors.New("sw4rm: evaluation refused: " + resp.GetReason())
	}
	return nil
}

// Decide records a result as the opener (an empty result decides the latest version).
func (c *Client) Decide(ctx context.Context, id, contentType string, result []byte) error {
	_, err := c.svc.Decide(ctx, &negotiationpb.Decision{NegotiationId: id, DecidedBy: c.agent.ID(), ContentType: contentType, Result: result})
	return err
}

// Abort ends the negotiation.
func (c *Client) Abort(ctx context.Context, id, reason string) error {
	_, err := c.svc.Abort(ctx, &negotiationpb.AbortRequest{NegotiationId: id, Reason: reason})
	return err
}

// EffectivePolicy reads the negotiation's effective policy (§17.2).
func (c *Client) EffectivePolicy(ctx context.Context, id string) (*policypb.EffectivePolicy, error) {
	resp, err := c.policy.GetEffectivePolicy(ctx, &schedulerpb.GetEffectivePolicyRequest{NegotiationId: id})
	if err != nil {
		return nil, err
	}
	return resp.GetEffective(), nil
}

// Event is a §17.1 negotiation event; fields not of its kind are empty.
type Event struct {
	Kind          string          `json:"kind"`
	TS            string          `json:"ts"`
	Seq           int             `json:"seq"`
	NegotiationID string          `json:"negotiation_id"`
	Topic         string          `json:"topic,omitempty"`
	Corr          string          `json:"corr,omitempty"`
	Profile       string          `json:"profile,omitempty"`
	Policy        json.RawMessage `json:"policy,omitempty"`
	From          string          `json:"from,omitempty"`
	CT            string          `json:"ct,omitempty"`
	PayloadB64    string          `json:"payload_b64,omitempty"`
	Score         float64         `json:"score,omitempty"`
	Notes         string          `json:"notes,omitempty"`
	By            string          `json:"by,omitempty"`
	ResultB64     string          `json:"result_b64,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Round         int             `json:"round,omitempty"`
	// ErrorCode is an abort's error_code when it has one: "hitl_unavailable" when a human was
	// needed, the HITL component was unavailable and the fallback denied (§15.4).
	ErrorCode string `json:"error_code,omitempty"`
	// HITLUnavailablePolicy is, on the policy event, the negotiation's own
	// hitl_unavailable_policy when Open chose one (sw4rm-hitl-unavailable-policy).
	HITLUnavailablePolicy json.RawMessage `json:"hitl_unavailable_policy,omitempty"`
}

// ParseEvent decodes a NEGOTIATION envelope's payload; ok=false for other envelopes.
func ParseEvent(env *commonpb.Envelope) (Event, bool, error) {
	if env.GetMessageType() != commonpb.MessageType_NEGOTIATION {
		return Event{}, false, nil
	}
	var e Event
	if err := json.Unmarshal(env.GetPayload(), &e); err != nil {
		return Event{}, true, fmt.Errorf("negotiation event: %w", err)
	}
	return e, true, nil
}

// Payload decodes a propose or counter event's payload_b64.
func (e Event) Payload() ([]byte, error) { return base64.StdEncoding.DecodeString(e.PayloadB64) }

// Result decodes a decide event's result_b64.
func (e Event) Result() ([]byte, error) { return base64.StdEncoding.DecodeString(e.ResultB64) }

// DebateResult decodes a debate's decide result.
func (e Event) DebateResult() (debate.Result, error) {
	var r debate.Result
	b, err := e.Result()
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// Turn is a debate turn task's params; ok=false for tasks that are not debate turns.
func Turn(t sdk.Task) (debate.TurnParams, bool, error) {
	if t.ContentType != DebateTurnContentType {
		return debate.TurnParams{}, false, nil
	}
	var p debate.TurnParams
	err := json.Unmarshal(t.Params, &p)
	return p, true, err
}

// FinalVerdict renders the closing line a final-round turn ends with (ADR-011).
func FinalVerdict(label string, score, confidence float64) string {
	return fmt.Sprintf("%s: %s score=%g confidence=%g", debate.VerdictMarker, label, score, confidence)
}
