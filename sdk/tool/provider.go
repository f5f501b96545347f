package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	ptool "github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// scheduler is the agent_id of the scheduler, to which a provider answers.
const scheduler = "scheduler"

// OfferPolicy is the execution policy of an Offer (§18.5): the provider agent honours it.
type OfferPolicy = ptool.CallPolicy

// Offer is a call the scheduler routed to this agent, which registered the tool over
// ConnectorService (a TOOL_CALL envelope, §18.2). The agent answers it with Frame, Result or
// Fail.
type Offer = ptool.CallPayload

// ParseOffer reads a TOOL_CALL envelope; ok is false for any other message.
func ParseOffer(env *commonpb.Envelope) (Offer, bool, error) {
	if env.GetMessageType() != commonpb.MessageType_TOOL_CALL {
		return Offer{}, false, nil
	}
	var o Offer
	if err := json.Unmarshal(env.GetPayload(), &o); err != nil {
		return Offer{}, true, fmt.Errorf("sw4rm: a TOOL_CALL payload: %w", err)
	}
	return o, true, nil
}

// CancelledCall returns the call_id of a NOTIFICATION saying that a call offered to this
// agent ended without its answer (cancelled, or past its deadline): the agent should stop.
func CancelledCall(env *commonpb.Envelope) (string, bool) {
	if env.GetMessageType() != commonpb.MessageType_NOTIFICATION {
		return "", false
	}
	var n struct {
		Event  string `json:"event"`
		CallID string `json:"call_id"`
	}
	if json.Unmarshal(env.GetPayload(), &n) != nil || n.Event != "tool_cancelled" {
		return "", false
	}
	return n.CallID, true
}

// Provider answers the calls the scheduler routes to an agent that provides tools.
type Provider struct {
	agent *sdk.Agent
}

// NewProvider returns the provider side of a dialled agent.
func NewProvider(a *sdk.Agent) *Provider { return &Provider{agent: a} }

// Frame sends one frame of a call's output while it runs (a TOOL_RESULT with "final":
// false); the caller's stream gets it at once.
func (p *Provider) Frame(ctx context.Context, callID, contentType string, data []byte) error {
	final := false
	return p.send(ctx, commonpb.MessageType_TOOL_RESULT, callID, map[string]any{"call_id": callID, "status": "OK", "result_b64": data, "content_type": contentType, "final": &final})
}

// Result ends a call with its result (a TOOL_RESULT).
func (p *Provider) Result(ctx context.Context, callID, contentType string, data []byte) error {
	return p.send(ctx, commonpb.MessageType_TOOL_RESULT, callID, map[string]any{"call_id": callID, "status": "OK", "result_b64": data, "content_type": contentType})
}

// Fail ends a call with a TOOL_ERROR and one of the §18.3 codes, e.g. "TOOL_FAILED".
func (p *Provider) Fail(ctx context.Context, callID, code, note string) error {
	return p.send(ctx, commonpb.MessageType_TOOL_ERROR, callID, map[string]any{"call_id": callID, "error_code": code, "note": note})
}

func (p *Provider) send(ctx context.Context, mt commonpb.MessageType, callID string, payload map[string]any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	_, err = p.agent.Send(ctx, sdk.Message{To: scheduler, Type: mt, CorrelationID: callID, ContentType: "application/json", Payload: b})
	return err
}
