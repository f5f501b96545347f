package frontend

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// directoryService serves the extension sw4rmext.directory.v1.DirectoryService: the reads
// the canonical services lack (§5.1 forbids adding them there) — an agent's registry record
// and lifecycle state (§14), one handoff's state (§17.6) and the tool providers (§18.1).
// Agents and providers are discovery data, for any proven caller (frontend/authz.go); a
// handoff is for its parties and operators, which GetHandoff checks itself.
type directoryService struct {
	directorypb.UnimplementedDirectoryServiceServer
	s *Server
}

// GetAgent returns one agent's registry record; an unknown agent is no_route.
func (d *directoryService) GetAgent(ctx context.Context, req *directorypb.GetAgentRequest) (*directorypb.AgentEntry, error) {
	if perr := protocol.ValidateGetAgent(req); perr != nil {
		return nil, perr
	}
	rec, err := d.s.store.Registry().GetAgent(ctx, req.GetAgentId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered", req.GetAgentId())
	}
	if err != nil {
		return nil, failed("registry lookup", err)
	}
	return agentEntry(rec), nil
}

// ListAgents returns the registered agents ordered by agent_id, those that declare the
// capability and are in the state when the request names them.
func (d *directoryService) ListAgents(ctx context.Context, req *directorypb.ListAgentsRequest) (*directorypb.ListAgentsResponse, error) {
	if perr := protocol.ValidateListAgents(req); perr != nil {
		return nil, perr
	}
	recs, err := d.s.store.Registry().ListAgents(ctx)
	if err != nil {
		return nil, failed("list the registry", err)
	}
	out := &directorypb.ListAgentsResponse{}
	for _, rec := range recs {
		if c := req.GetCapability(); c != "" && !slices.Contains(rec.Descriptor.GetCapabilities(), c) {
			continue
		}
		if s := req.GetState(); s != "" && rec.State.String() != s {
			continue
		}
		out.Agents = append(out.Agents, agentEntry(rec))
	}
	return out, nil
}

// agentEntry is the answer for one registry record.
func agentEntry(rec store.AgentRecord) *directorypb.AgentEntry {
	return &directorypb.AgentEntry{Agent: rec.Descriptor, State: rec.State.String(), Health: rec.Health,
		RegisteredAt: timestampOrNil(rec.RegisteredAt), LastHeartbeat: timestampOrNil(rec.LastHeartbeat)}
}

// timestampOrNil is t as a timestamp, or nil (unset) when t is zero.
func timestampOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// GetHandoff returns one handoff's state (§17.6) to its originator, the agent it is offered
// to or that accepted it, or an operator; any other agent is refused with
// permission_denied, an unknown request_id is no_route. The context snapshot goes to the
// parties only: an operator or an anonymous caller (authentication off or optional, naming
// no agent) gets the rest without it.
func (d *directoryService) GetHandoff(ctx context.Context, req *directorypb.GetHandoffRequest) (*directorypb.HandoffEntry, error) {
	if perr := protocol.ValidateGetHandoff(req); perr != nil {
		return nil, perr
	}
	rec, err := d.s.store.Handoffs().GetHandoff(ctx, req.GetRequestId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no handoff %q", req.GetRequestId())
	}
	if err != nil {
		return nil, failed("handoff lookup", err)
	}
	p := auth.FromContext(ctx)
	agent := handoffReader(ctx, p)
	party := agent != "" && isHandoffParty(rec, agent)
	if agent != "" && !party && p.Operator == "" {
		return nil, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "agent %q is not a party to handoff %s: only its originator, the agent it is offered to or that accepted it, and operators may read it", agent, rec.RequestID)
	}
	var r handoffpb.HandoffRequest
	if err := proto.Unmarshal(rec.Request, &r); err != nil {
		return nil, internalf("stored handoff %s does not decode: %v", rec.RequestID, err)
	}
	out := &directorypb.HandoffEntry{RequestId: rec.RequestID, State: rec.Status.String(), FromAgent: rec.From, ToAgent: r.GetToAgent(),
		OfferedTo: rec.Target, AcceptedBy: rec.AcceptedBy, CapabilitiesRequired: r.GetCapabilitiesRequired(), Reason: r.GetReason(),
		EndReason: rec.EndReason, CorrelationId: rec.Correlation, Priority: r.GetPriority(), ContextContentType: rec.ContextContentType,
		CreatedAt: timestampOrNil(rec.CreatedAt), UpdatedAt: timestampOrNil(rec.UpdatedAt)}
	if party {
		out.ContextSnapshot = r.GetContextSnapshot()
	}
	return out, nil
}

// handoffReader is the agent a GetHandoff is read as: the proven agent, or — for an
// anonymous caller, which authentication off or optional lets through — the agent it names in
// sw4rm-agent-id, as ToolService takes it. An operator reads as no agent: naming one in the
// metadata never gets it a party's view.
func handoffReader(ctx context.Context, p auth.Principal) string {
	switch {
	case p.Agent != "":
		return p.Agent
	case p.Anonymous():
		return strings.TrimSpace(firstMD(ctx, wire.AgentIDKey))
	}
	return ""
}

// isHandoffParty reports whether agent is the handoff's originator, the agent it is offered to
// now or the agent that accepted it.
func isHandoffParty(rec store.HandoffRecord, agent string) bool {
	return agent == rec.From || agent == rec.Target || agent == rec.AcceptedBy
}

// ListToolProviders returns every provider that offers at least one tool, ordered by
// provider_id, with its descriptors sorted by tool_name (§18.1); the kind filter keeps one
// kind.
func (d *directoryService) ListToolProviders(ctx context.Context, req *directorypb.ListToolProvidersRequest) (*directorypb.ListToolProvidersResponse, error) {
	if perr := tool.ValidateProviderKind(req.GetKind()); perr != nil {
		return nil, perr
	}
	recs, err := d.s.store.ToolProviders().ListTools(ctx, "")
	if err != nil {
		return nil, failed("list the tool providers", err)
	}
	out := &directorypb.ListToolProvidersResponse{}
	var cur *directorypb.ToolProvider
	// ListTools("") is sorted by provider_id then tool_name, so one provider's tools are
	// adjacent.
	for _, r := range recs {
		if k := req.GetKind(); k != "" && r.Kind != k {
			continue
		}
		if cur == nil || cur.GetProviderId() != r.ProviderID {
			cur = &directorypb.ToolProvider{ProviderId: r.ProviderID, Kind: r.Kind, RegisteredAt: timestampOrNil(r.RegisteredAt)}
			out.Providers = append(out.Providers, cur)
		}
		cur.Tools = append(cur.Tools, r.Descriptor)
	}
	return out, nil
}
