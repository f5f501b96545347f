package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// scheduler is the agent_id of the scheduler, to which a provider answers.
const scheduler = "scheduler"

// OfferPolicy is the execution policy of an Offer (§18.5): the provider agent honours it.
type OfferPolicy struct {
	// TimeoutMs bounds the call; past it the scheduler ends the call TOOL_TIMEOUT.
	TimeoutMs int64 `json:"timeout_ms"`
	// BudgetWallMs and BudgetCPUMs are the call's budgets (0: none).
	BudgetWallMs int64 `json:"budget_wall_ms,omitempty"`
	// BudgetCPUMs: see BudgetWallMs.
	BudgetCPUMs int64 `json:"budget_cpu_ms,omitempty"`
	// NetworkPolicy and PrivilegeLevel are the call's.
	NetworkPolicy string `json:"network_policy"`
	// PrivilegeLevel: see NetworkPolicy.
	PrivilegeLevel string `json:"privilege_level"`
	// WorktreeRequired says the call must run in the caller's worktree.
	WorktreeRequired bool `json:"worktree_required,omitempty"`
}

// Offer is a call the scheduler routed to this agent, which registered the tool over
// ConnectorService (a TOOL_CALL envelope, §18.2). The agent answers it with Frame, Result or
// Fail.
type Offer struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// ToolName and ProviderID name the tool.
	ToolName string `json:"tool_name"`
	// ProviderID: see ToolName.
	ProviderID string `json:"provider_id"`
	// Args are the arguments, already valid against the tool's input schema.
	Args json.RawMessage `json:"args"`
	// ContentType is the arguments' content type.
	ContentType string `json:"content_type"`
	// Policy is the effective execution policy.
	Policy OfferPolicy `json:"execution_policy"`
	// Caller is who made the call; Worktree the caller's worktree, to which the provider
	// confines the call (§18.2: "Providers MUST run under the invoking Agent's confinement").
	Caller string `json:"caller"`
	// Worktree: see Caller.
	Worktree string `json:"worktree,omitempty"`
}

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
