package frontend

import (
	"context"
	"encoding/json"
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

// GetAgent returns one agent's registry record with its inbound buffer and scheduler state
// (addAgentLoad); an unknown agent is no_route.
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
	e := agentEntry(rec)
	d.addAgentLoad(ctx, []*directorypb.AgentEntry{e})
	return e, nil
}

// ListAgents returns the registered agents ordered by agent_id, those that declare the
// capability and are in the state when the request names them, each with its inbound buffer
// and scheduler state (addAgentLoad).
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
	d.addAgentLoad(ctx, out.Agents)
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

// ownWork is whose work a listing of agents' work shows, given the filter the request names
// (an agent_id, or a caller as tool calls record it) and what the caller's own is: for an
// operator, or an anonymous caller that authentication off or optional lets through, the
// filter as named; for an agent, its own — an empty filter means it, another is refused
// with permission_denied.
func ownWork(p auth.Principal, field, named, own string) (string, error) {
	if p.Operator != "" || p.Agent == "" {
		return named, nil
	}
	if named != "" && named != own {
		return "", protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s %q is not the caller %s: an agent lists only its own work, operators everyone's", field, named, p)
	}
	return own, nil
}

// ListTasks returns the activity buffer's entries (§10) that match the filters: the active
// ones, oldest first, then the ended ones of the short history, most recently ended first.
// An agent lists only its own (ownWork).
func (d *directoryService) ListTasks(ctx context.Context, req *directorypb.ListTasksRequest) (*directorypb.ListTasksResponse, error) {
	if perr := protocol.ValidateListTasks(req); perr != nil {
		return nil, perr
	}
	p := auth.FromContext(ctx)
	agent, err := ownWork(p, "agent_id", req.GetAgentId(), p.Agent)
	if err != nil {
		return nil, err
	}
	limit, state := protocol.ListLimit(req.GetLimit()), store.ActivityStatus(req.GetState())
	f := store.ActivityFilter{AgentID: agent, TaskID: req.GetTaskId(), Limit: limit}
	var entries []store.ActivityEntry
	if state == "" || state == store.ActivityActive {
		active, err := d.s.store.ActivityBuffer().List(ctx, f)
		if err != nil {
			return nil, failed("list the activity buffer", err)
		}
		entries = active
	}
	if state != store.ActivityActive && len(entries) < limit {
		if state != "" {
			// The store filters no status: look among as many ended entries as a listing
			// may hold, then keep the state's.
			f.Limit = protocol.MaxListLimit
		}
		ended, err := d.s.store.ActivityBuffer().History(ctx, f)
		if err != nil {
			return nil, failed("list the activity history", err)
		}
		for _, e := range ended {
			if state == "" || e.Status == state {
				entries = append(entries, e)
			}
		}
	}
	out := &directorypb.ListTasksResponse{}
	for _, e := range entries[:min(limit, len(entries))] {
		out.Tasks = append(out.Tasks, &directorypb.TaskEntry{AgentId: e.AgentID, TaskId: e.TaskID, State: string(e.Status),
			RepoId: e.RepoID, WorktreeId: e.WorktreeID, Branch: e.Branch, Description: e.Description, WaitingOn: e.WaitingOn,
			CreatedAt: timestampOrNil(e.CreatedAt), CompletedAt: timestampOrNil(e.CompletedAt)})
	}
	return out, nil
}

// ListToolCalls returns the tool calls (§18) that match the filters, most recently made
// first, each with how its final frame's summary says it ended. An agent lists only the
// calls it made (ownWork).
func (d *directoryService) ListToolCalls(ctx context.Context, req *directorypb.ListToolCallsRequest) (*directorypb.ListToolCallsResponse, error) {
	if perr := protocol.ValidateListToolCalls(req); perr != nil {
		return nil, perr
	}
	p := auth.FromContext(ctx)
	caller, err := ownWork(p, "caller", req.GetCaller(), p.String())
	if err != nil {
		return nil, err
	}
	limit, state := protocol.ListLimit(req.GetLimit()), req.GetState()
	f := store.ToolCallFilter{Caller: caller, ProviderID: req.GetProviderId(), ToolName: req.GetToolName(), Limit: limit}
	switch state {
	case "":
	case "running":
		f.Phase = store.OpenToolCall
	default:
		// How a call ended is in its final frame's summary, which the store does not filter
		// on: look among as many ended calls as a listing may hold, then keep the state's.
		f.Phase, f.Limit = store.FinalToolCall, protocol.MaxListLimit
	}
	calls, err := d.s.store.ToolCalls().ListCalls(ctx, f)
	if err != nil {
		return nil, failed("list the tool calls", err)
	}
	out := &directorypb.ListToolCallsResponse{}
	for _, c := range calls {
		e := &directorypb.ToolCallEntry{CallId: c.CallID, Caller: c.Caller, ProviderId: c.ProviderID, ToolName: c.ToolName,
			State: "running", Frames: c.Frames, Bytes: c.Bytes, CreatedAt: timestampOrNil(c.CreatedAt)}
		if c.Final {
			e.State, e.ErrorCode, e.Message = toolCallEnd(c.Summary)
		}
		if state != "" && e.State != state {
			continue
		}
		if out.Calls = append(out.Calls, e); len(out.Calls) == limit {
			break
		}
	}
	return out, nil
}

// toolCallEnd is how a call ended, read from its final frame's summary (tool.Summary):
// "ok", "error" or "cancelled", with the §18.3 code and message of a call that is not ok. A
// summary that does not say is reported as an error rather than guessed ok.
func toolCallEnd(summary []byte) (state, code, msg string) {
	var s tool.Summary
	if err := json.Unmarshal(summary, &s); err == nil {
		switch s.Status {
		case "ok", "error", "cancelled":
			return s.Status, s.ErrorCode, s.Message
		}
	}
	return "error", string(tool.CodeInternal), "the call's final frame has no readable summary"
}
