package frontend

import (
	"fmt"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/auditadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

// Authorization: one rule per method, deny by default (§6.5: "comprehensive authorization
// controls for all operations"). A method with no rule is refused in required mode, so a new
// service is closed until its rule is written here (docs/architecture.md's checklist).

// who is the kind of principal a rule admits.
type who int

const (
	// anyone: also anonymous callers (health checks, reflection).
	anyone who = iota
	// authenticated: any proven agent or operator.
	authenticated
	// self: only the agent the request names (the field), never on its behalf.
	self
	// selfOrOperator: the agent the request names, or an operator.
	selfOrOperator
	// operator: operators only.
	operator
)

// rule is the authorization of one method.
type rule struct {
	who who
	// field names the agent the request acts as or on, for self and selfOrOperator; what
	// names that field in refusals.
	field func(req any) string
	what  string
}

// methodRules holds the rule of every method the frontend serves.
var methodRules = map[string]rule{

	// An agent sends only as itself, which also makes "only the recipient may ACK" (§11) hold:
	// an ACK is attributed to its producer_id.
	routerpb.RouterService_SendMessage_FullMethodName: {who: self, what: "msg.producer_id",
		field: func(r any) string { return r.(*routerpb.SendMessageRequest).GetMsg().GetProducerId() }},
	// An agent streams and confirms only its own inbox.
	routerpb.RouterService_StreamIncoming_FullMethodName: {who: self, what: "agent_id",
		field: func(r any) string { return r.(*routerpb.StreamRequest).GetAgentId() }},
	routerpb.RouterService_AckDelivery_FullMethodName: {who: self, what: "agent_id",
		field: func(r any) string { return r.(*routerpb.DeliveryAckRequest).GetAgentId() }},

	// Registration is the key handshake (§6.2): the agent itself, proving its key (a first
	// registration proves the key it registers), or an operator; RegisterAgent checks the rest.
	registrypb.RegistryService_RegisterAgent_FullMethodName: {who: selfOrOperator, what: "agent.agent_id",
		field: func(r any) string { return r.(*registrypb.RegisterAgentRequest).GetAgent().GetAgentId() }},
	registrypb.RegistryService_Heartbeat_FullMethodName: {who: self, what: "agent_id",
		field: func(r any) string { return r.(*registrypb.HeartbeatRequest).GetAgentId() }},
	registrypb.RegistryService_DeregisterAgent_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*registrypb.DeregisterAgentRequest).GetAgentId() }},

	// Any proven agent may submit work to another (coordinators do); controlling an agent's
	// tasks and lifecycle is for operators or the agent itself (§7.2, §8, §10).
	schedulerpb.SchedulerService_SubmitTask_FullMethodName: {who: authenticated},
	schedulerpb.SchedulerService_RequestPreemption_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*schedulerpb.PreemptRequest).GetAgentId() }},
	schedulerpb.SchedulerService_ShutdownAgent_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*schedulerpb.ShutdownAgentRequest).GetAgentId() }},
	schedulerpb.SchedulerService_PollActivityBuffer_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*schedulerpb.PollActivityBufferRequest).GetAgentId() }},
	schedulerpb.SchedulerService_PurgeActivity_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*schedulerpb.PurgeActivityRequest).GetAgentId() }},

	// The scheduler's negotiation policy (§17.2) is the deployment's: operators set it, any
	// proven participant reads it (a negotiator may want to know the rules it is held to).
	schedulerpb.SchedulerPolicyService_SetNegotiationPolicy_FullMethodName: {who: operator},
	schedulerpb.SchedulerPolicyService_SetPolicyProfiles_FullMethodName:    {who: operator},
	schedulerpb.SchedulerPolicyService_GetNegotiationPolicy_FullMethodName: {who: authenticated},
	schedulerpb.SchedulerPolicyService_ListPolicyProfiles_FullMethodName:   {who: authenticated},

	// The room (§17.5): a proposal is its producer's, a vote its critic's.
	negotiationroompb.NegotiationRoomService_SubmitProposal_FullMethodName: {who: self, what: "proposal.producer_id",
		field: func(r any) string { return r.(*negotiationroompb.SubmitProposalRequest).GetProposal().GetProducerId() }},
	negotiationroompb.NegotiationRoomService_SubmitVote_FullMethodName: {who: self, what: "vote.critic_id",
		field: func(r any) string { return r.(*negotiationroompb.SubmitVoteRequest).GetVote().GetCriticId() }},
	negotiationroompb.NegotiationRoomService_GetVotes_FullMethodName:        {who: authenticated},
	negotiationroompb.NegotiationRoomService_GetDecision_FullMethodName:     {who: authenticated},
	negotiationroompb.NegotiationRoomService_WaitForDecision_FullMethodName: {who: authenticated},

	// Raising a HITL invocation is any participant's; deciding one is an operator's (§15).
	hitlpb.HitlService_Decide_FullMethodName:                    {who: authenticated},
	hitladminpb.HitlAdminService_ListInvocations_FullMethodName: {who: operator},
	hitladminpb.HitlAdminService_GetInvocation_FullMethodName:   {who: operator},
	hitladminpb.HitlAdminService_Decide_FullMethodName:          {who: operator},
	hitladminpb.HitlAdminService_History_FullMethodName:         {who: operator},
	dlqadminpb.DlqAdminService_ListDeadLetters_FullMethodName:   {who: operator},
	dlqadminpb.DlqAdminService_GetDeadLetter_FullMethodName:     {who: operator},
	dlqadminpb.DlqAdminService_Requeue_FullMethodName:           {who: operator},
	dlqadminpb.DlqAdminService_Export_FullMethodName:            {who: operator},
	// The audit log (§19) is an operator's to read.
	auditadminpb.AuditAdminService_ListAuditEvents_FullMethodName: {who: operator},

	// Handoffs (§17.6): an agent hands off only its own work and answers only offers made to
	// it; the handlers check the rest — CompleteHandoff that the caller accepted the handoff
	// (the workflow's validator, given the proven caller), CancelDelegation that the caller
	// requested the correlation's handoffs or is an operator.
	handoffpb.HandoffService_RequestHandoff_FullMethodName: {who: self, what: "from_agent",
		field: func(r any) string { return r.(*handoffpb.HandoffRequest).GetFromAgent() }},
	handoffpb.HandoffService_AcceptHandoff_FullMethodName: {who: self, what: "accepting_agent",
		field: func(r any) string { return r.(*handoffpb.HandoffResponse).GetAcceptingAgent() }},
	handoffpb.HandoffService_RejectHandoff_FullMethodName: {who: self, what: "accepting_agent",
		field: func(r any) string { return r.(*handoffpb.HandoffResponse).GetAcceptingAgent() }},
	handoffpb.HandoffService_GetPendingHandoffs_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*handoffpb.GetPendingHandoffsRequest).GetAgentId() }},
	handoffpb.HandoffService_CompleteHandoff_FullMethodName:  {who: authenticated},
	handoffpb.HandoffService_CancelDelegation_FullMethodName: {who: authenticated},

	// Negotiations (§17): any proven agent or operator may open one (it is recorded as the
	// opener); drafts and evaluations are their participant's own (the workflow checks that
	// the agent participates and that it is its turn); Decide is the opener's or an
	// operator's, Abort also a participant's (the handlers check it against the negotiation).
	negotiationpb.NegotiationService_Open_FullMethodName: {who: authenticated},
	negotiationpb.NegotiationService_Propose_FullMethodName: {who: self, what: "from_agent",
		field: func(r any) string { return r.(*negotiationpb.Proposal).GetFromAgent() }},
	negotiationpb.NegotiationService_Counter_FullMethodName: {who: self, what: "from_agent",
		field: func(r any) string { return r.(*negotiationpb.CounterProposal).GetFromAgent() }},
	negotiationpb.NegotiationService_Evaluate_FullMethodName: {who: self, what: "from_agent",
		field: func(r any) string { return r.(*negotiationpb.Evaluation).GetFromAgent() }},
	negotiationpb.NegotiationService_Decide_FullMethodName: {who: authenticated},
	negotiationpb.NegotiationService_Abort_FullMethodName:  {who: authenticated},
	// The scheduler's policy (§17.2): reading is anyone's proven; an evaluation report is its
	// participant's own; the HITL door of a negotiation is an operator's.
	schedulerpb.SchedulerPolicyService_GetEffectivePolicy_FullMethodName: {who: authenticated},
	schedulerpb.SchedulerPolicyService_SubmitEvaluation_FullMethodName: {who: self, what: "report.from_agent",
		field: func(r any) string { return r.(*schedulerpb.SubmitEvaluationRequest).GetReport().GetFromAgent() }},
	schedulerpb.SchedulerPolicyService_HitlAction_FullMethodName: {who: operator},

	// Worktree binding (§16): an agent binds, unbinds and asks to switch only itself, and
	// reads its own binding; operators may do all of that for any agent, and alone decide
	// switches (§16: non-home operation needs policy or HITL approval).
	worktreepb.WorktreeService_Bind_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*worktreepb.BindRequest).GetAgentId() }},
	worktreepb.WorktreeService_Unbind_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*worktreepb.UnbindRequest).GetAgentId() }},
	worktreepb.WorktreeService_RequestSwitch_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*worktreepb.SwitchRequest).GetAgentId() }},
	worktreepb.WorktreeService_Status_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*worktreepb.StatusRequest).GetAgentId() }},
	worktreepb.WorktreeService_ApproveSwitch_FullMethodName: {who: operator},
	worktreepb.WorktreeService_RejectSwitch_FullMethodName:  {who: operator},

	loggingpb.LoggingService_Ingest_FullMethodName: {who: selfOrOperator, what: "agent_id",
		field: func(r any) string { return r.(*loggingpb.LogEvent).GetAgentId() }},
	activitypb.ActivityService_AppendArtifact_FullMethodName:   {who: authenticated},
	activitypb.ActivityService_ListArtifacts_FullMethodName:    {who: authenticated},
	reasoningpb.ReasoningProxy_CheckParallelism_FullMethodName: {who: authenticated},
	reasoningpb.ReasoningProxy_EvaluateDebate_FullMethodName:   {who: authenticated},
	reasoningpb.ReasoningProxy_Summarize_FullMethodName:        {who: authenticated},

	// DAG workflows (§17.7): any proven agent or operator may call these; the handlers then
	// decide the workflow itself (access.go): its creator, an operator, or an agent an ACL
	// rule grants dag:<workflow_id> may add a version, start, read, resume or read back a
	// definition; a new workflow_id is the ACL's to decide.
	workflowpb.WorkflowService_CreateWorkflow_FullMethodName:     {who: authenticated},
	workflowpb.WorkflowService_StartWorkflow_FullMethodName:      {who: authenticated},
	workflowpb.WorkflowService_GetWorkflowState_FullMethodName:   {who: authenticated},
	workflowpb.WorkflowService_ResumeWorkflow_FullMethodName:     {who: authenticated},
	workflowdefpb.DefinitionService_GetDefinition_FullMethodName: {who: authenticated},

	// Tool providers (§18.1): an agent advertises only its own tools, under a provider_id
	// equal to its agent_id; an operator registers any provider (a shared tool service that
	// is not an agent). Configured MCP providers are refused to both (the handler checks
	// it). Reading descriptors is any proven caller's: agents choose tools from them.
	connectorpb.ConnectorService_RegisterProvider_FullMethodName: {who: selfOrOperator, what: "provider_id",
		field: func(r any) string { return r.(*connectorpb.ProviderRegisterRequest).GetProviderId() }},
	connectorpb.ConnectorService_DescribeTools_FullMethodName: {who: authenticated},

	// Directory reads (sw4rmext.directory.v1, docs/architecture.md): agents and tool
	// providers are discovery data (§14: participants maintain local discovery state; §18.1:
	// agents choose tools from descriptors), any proven caller's. A handoff is its parties'
	// and operators' (§17.6): the handler checks the caller against the handoff it names, and
	// gives the context snapshot to the parties alone. Tasks and tool calls are their agent's,
	// DAG runs their definition's creator's and those of agents an ACL rule grants dag:<id>:
	// the handlers list an operator everything, an agent its own work and what it is granted,
	// and refuse an agent that names another's.
	directorypb.DirectoryService_GetAgent_FullMethodName:          {who: authenticated},
	directorypb.DirectoryService_ListAgents_FullMethodName:        {who: authenticated},
	directorypb.DirectoryService_GetHandoff_FullMethodName:        {who: authenticated},
	directorypb.DirectoryService_ListToolProviders_FullMethodName: {who: authenticated},
	directorypb.DirectoryService_ListTasks_FullMethodName:         {who: authenticated},
	directorypb.DirectoryService_ListDAGRuns_FullMethodName:       {who: authenticated},
	directorypb.DirectoryService_ListToolCalls_FullMethodName:     {who: authenticated},
	// Negotiations are their participants' (§17), but the listing shows every one with its
	// drafts and transcript, as the operator console does: operators only.
	directorypb.DirectoryService_ListNegotiations_FullMethodName: {who: operator},

	// Tool calls (§18): any proven agent or operator may call; the handler then checks the
	// rest — an agent calls only for itself (sw4rm-agent-id), the ACL decides the tool and its
	// execution policy (access.go), a call runs in the caller's own worktree, and only the
	// call's owner, an operator or an ACL grant of tool_call:<call_id> streams or cancels it
	// (the provider agent may also stream it).
	toolpb.ToolService_Call_FullMethodName:       {who: authenticated},
	toolpb.ToolService_CallStream_FullMethodName: {who: authenticated},
	toolpb.ToolService_Cancel_FullMethodName:     {who: authenticated},
}

// serviceRules gives one rule to every method of a service whose methods share it; methodRules
// takes precedence.
var serviceRules = map[string]rule{
	"/sw4rmext.keys.v1.KeyAdminService/":                {who: operator},
	"/" + healthpb.Health_ServiceDesc.ServiceName + "/": {who: anyone},
	"/grpc.reflection.v1.ServerReflection/":             {who: anyone},
	"/grpc.reflection.v1alpha.ServerReflection/":        {who: anyone},
	"/sw4rm.negotiation_room.NegotiationRoomService/":   {who: authenticated},
}

// ruleOf returns the rule of a method, if it has one.
func ruleOf(method string) (rule, bool) {
	if r, ok := methodRules[method]; ok {
		return r, true
	}
	r, ok := serviceRules[serviceOf(method)]
	return r, ok
}

// authorize applies the method's rule to a proven (or anonymous) principal. In optional mode
// an anonymous caller passes, noted in the log; a proven one is held to the rule.
func (a *Authenticator) authorize(method string, req any, p auth.Principal) error {
	r, ok := ruleOf(method)
	if !ok {
		if a.cfg.Mode == auth.Required {
			return fmt.Errorf("%s has no authorization rule, and required mode denies by default", method)
		}
		return nil
	}
	if r.who == anyone {
		return nil
	}
	if p.Anonymous() {
		if a.cfg.Mode == auth.Required {
			return fmt.Errorf("%s needs a proven caller: sign the call as its agent (§6.2) or present an operator token", method)
		}
		a.noteUnsigned(method)
		return nil
	}
	switch r.who {
	case authenticated:
		return nil
	case operator:
		if p.Operator == "" {
			return fmt.Errorf("%s is for operators; %s is not one", method, p)
		}
		return nil
	case selfOrOperator:
		if p.Operator != "" {
			return nil
		}
	}
	// self, or selfOrOperator without an operator: the agent must be the one named.
	if p.Agent == "" {
		return fmt.Errorf("%s is made by an agent for itself; sign it as %s", method, r.what)
	}
	if named := r.field(req); named != p.Agent {
		return fmt.Errorf("%s %q is not the caller %q: an agent acts only as itself", r.what, named, p.Agent)
	}
	return nil
}
