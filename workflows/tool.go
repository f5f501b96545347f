package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// KindTool is the SW4RMKind search-attribute value of tool call runs.
const KindTool = "tool"

// OutboxToolStart is the outbox entry kind that starts a call's workflow: the frontend
// records the call (store.ToolCalls.CreateCall) and the start in one write (payload
// ToolStartPayload), so a recorded call always runs even if the frontend dies or Temporal
// is unreachable at that moment; a run already started counts as delivered.
const OutboxToolStart = "tool.start"

// ToolStartPayload is the payload of an OutboxToolStart outbox entry.
type ToolStartPayload struct {
	// Input starts the workflow.
	Input ToolCallInput
}

// OutboxToolProvided is the outbox entry kind that tells the call of an agent provider
// that the agent's final TOOL_RESULT or TOOL_ERROR is stored (payload ToolProvidedPayload).
const OutboxToolProvided = "tool.provided"

// ToolProvidedPayload is the payload of an OutboxToolProvided outbox entry.
type ToolProvidedPayload struct {
	// CallID is the call.
	CallID string
	// Provided is what the signal carries.
	Provided ToolProvided
}

// ToolProvided is the payload of ToolProvidedSignal: how the provider agent ended the call.
type ToolProvided struct {
	// Code is the TOOL_ERROR's code; empty for a TOOL_RESULT.
	Code tool.Code `json:",omitempty"`
	// Message is the TOOL_ERROR's note.
	Message string `json:",omitempty"`
	// FinalFrame is the stored final frame's frame_no.
	FinalFrame uint64
}

// Names of the tool call workflow's handlers.
const (
	// ToolCancelUpdate cancels a call (§18.6); it answers CANCELLED once the call's final
	// frame, marking the cancellation, is stored — or ALREADY_COMPLETED.
	ToolCancelUpdate = "tool.cancel"
	// ToolStatusQuery answers the call's ToolStatus.
	ToolStatusQuery = "tool.status"
	// ToolProvidedSignal tells the call of an agent provider that the agent answered and its
	// final frame is stored (payload ToolProvided).
	ToolProvidedSignal = "tool.provided"
	// ToolReleaseUpdate tells the call that an agent in it stopped (§8.4; payload
	// activities.AgentRelease, answer activities.ReleaseOutcome): a call the agent made is
	// cancelled (CANCELLED), a call to a tool the agent provides ends INTERRUPTED, since
	// nobody will answer it and whether the agent did the work is unknown.
	ToolReleaseUpdate = "tool.release"
)

// Timeouts of a tool call's attempts.
const (
	// ToolHeartbeatTimeout is how long an attempt may go without a heartbeat before Temporal
	// counts its worker dead: a non-idempotent call then ends INTERRUPTED, an idempotent one
	// is tried again.
	ToolHeartbeatTimeout = 5 * time.Second
	// ToolScheduleToStart bounds the wait for a worker of the provider's task queue: a call to
	// a provider no worker serves fails instead of waiting forever.
	ToolScheduleToStart = time.Minute
)

// ToolWorkflowID is the workflow ID of a tool call: "tool/<call_id>" (§18.2).
func ToolWorkflowID(callID string) string { return "tool/" + callID }

// ToolTaskQueue is the task queue of one provider's tools: "<base>-tool-<provider_id>". A
// worker polls it for each provider it can run, so tool workers scale per provider.
func ToolTaskQueue(base, providerID string) string { return base + "-tool-" + providerID }

// ToolStartOptions are the start options of workflow tool/<callID>. A call_id names one call
// for good: a second start with it joins the running call, and one after it ended is refused
// (the frontend answers from the stored frames instead).
func ToolStartOptions(callID, caller, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: ToolWorkflowID(callID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    temporal.NewSearchAttributes(KindKey.ValueSet(KindTool), AgentIDKey.ValueSet(caller)),
		// The bridge, which has the input, sets the summary (ToolSummary).
		StaticSummary: summary("tool call %s by %s (§18)", callID, caller),
	}
}

// ToolCallInput starts a tool call. The frontend resolved everything that needs I/O — the
// descriptor, the effective policy, the caller's worktree — so the run is deterministic.
type ToolCallInput struct {
	// Request is the attempt's request, without Attempt.
	Request tools.Request
	// Caller is the proven principal that made the call.
	Caller string
	// TaskQueue is the provider's task queue (ToolTaskQueue).
	TaskQueue string
	// PreApproved reports that the deployment's policy pre-approves this tool at PRIVILEGED
	// and FULL_ACCESS, so no HITL wait is needed (§18.5.3).
	PreApproved bool `json:",omitempty"`
	// Approval, when set, is the approval the call waits for before it runs, decided by the
	// frontend (tool.Policy.ApprovalReasons); PreApproved is then not used. Runs recorded
	// before it existed have none and follow NeedsApproval and PreApproved, as they did.
	Approval *ToolApproval `json:",omitempty"`
	// ProviderAgent, when set, is the agent that provides the tool (a provider registered
	// over ConnectorService, §18.2): the call is routed to it as a TOOL_CALL envelope and
	// ends with its TOOL_RESULT or TOOL_ERROR, instead of running on a tool worker.
	ProviderAgent string `json:",omitempty"`
	// ReplyTo, when set, is the agent that also receives the call's end as a TOOL_RESULT or
	// TOOL_ERROR envelope (§18.2), with correlation_id Correlation.
	ReplyTo     string `json:",omitempty"`
	Correlation string `json:",omitempty"`
}

// ToolApproval is the HITL approval a call waits for (TOOL_PRIVILEGE_ESCALATION, §18.5.3).
type ToolApproval struct {
	// InvocationID is the HITL invocation's id (ToolApprovalID), known to the frontend so
	// that it can tell the caller.
	InvocationID string
	// Timeout bounds the wait; past it the call is refused (deny by default). Zero means
	// the HITL default. Its JSON is text ("5m0s"; see MarshalJSON).
	Timeout time.Duration `json:",omitempty"`
	// Reasons say why the call needs it.
	Reasons []string
}

// MarshalJSON writes Timeout as text.
func (a ToolApproval) MarshalJSON() ([]byte, error) {
	type plain ToolApproval
	// The outer Timeout hides the embedded one (encoding/json takes the shallower field).
	return json.Marshal(struct {
		plain
		Timeout jsonform.Duration `json:",omitempty"`
	}{plain(a), jsonform.Duration(a.Timeout)})
}

// UnmarshalJSON reads Timeout as text or, as recorded histories hold it, as nanoseconds.
func (a *ToolApproval) UnmarshalJSON(data []byte) error {
	type plain ToolApproval
	v := struct {
		*plain
		Timeout jsonform.Duration
	}{plain: (*plain)(a)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	a.Timeout = time.Duration(v.Timeout)
	return nil
}

// ToolApprovalID is the HITL invocation id of call callID's approval: one per call, so a
// caller that joins the call again is told the same one.
func ToolApprovalID(callID string) string { return "tool-approval-" + callID }

// ToolCancel is the payload of ToolCancelUpdate.
type ToolCancel struct {
	// By is the proven principal that cancels.
	By string
	// Reason, when set, says why, after "cancelled by <By>" in the final frame's summary.
	Reason string `json:",omitempty"`
}

// ToolCancelResult answers ToolCancelUpdate: CANCELLED or ALREADY_COMPLETED (§18.6).
type ToolCancelResult struct {
	// Code is the answer's code.
	Code tool.Code
	// Message says what happened.
	Message string
	// FinalFrame is the frame_no of the call's final frame.
	FinalFrame uint64
}

// ToolStatus is what ToolStatusQuery answers and how the call ended.
type ToolStatus struct {
	// State is "awaiting_approval", "running" or "done".
	State string
	// Code is the error code of a call that failed or was cancelled; empty on success.
	Code tool.Code `json:",omitempty"`
	// Message says why.
	Message string `json:",omitempty"`
	// FinalFrame is the final frame's frame_no once stored.
	FinalFrame uint64 `json:",omitempty"`
	// HitlID is the HITL invocation of a privileged call (§18.5.3).
	HitlID string `json:",omitempty"`
}

// ToolCallResult is how a call ended; the output itself is in the stored frames.
type ToolCallResult = ToolStatus

// ToolCall runs one tool call (§18.2): the approval a privileged call needs (§18.5.3), then
// the tool as an activity on the provider's task queue with the policy's deadline, wall
// budget and retries (§18.3, §18.5.1), heartbeating so a dead worker is noticed; a cancel
// (§18.6) writes the final frame at once and stops the attempt. It always ends with exactly
// one final frame stored.
func ToolCall(ctx workflow.Context, in ToolCallInput) (ToolCallResult, error) {
	r := &toolRun{in: in, st: ToolStatus{State: "running"}}
	return r.run(ctx)
}

// toolRun is one call's state.
type toolRun struct {
	in ToolCallInput
	st ToolStatus
	// cancelled is set by a successful cancel; cancelWork stops the approval wait or the
	// attempt.
	cancelled  bool
	cancelWork workflow.CancelFunc
	// providerGone, set by ToolReleaseUpdate, is why the agent that provides the tool
	// stopped: the call ends INTERRUPTED.
	providerGone string
}

func (r *toolRun) run(ctx workflow.Context) (ToolCallResult, error) {
	if err := workflow.SetQueryHandler(ctx, ToolStatusQuery, func() (ToolStatus, error) { return r.st, nil }); err != nil {
		return ToolStatus{}, err
	}
	if err := workflow.SetUpdateHandler(ctx, ToolCancelUpdate, r.cancel); err != nil {
		return ToolStatus{}, err
	}
	// Registering a handler adds no command: runs recorded before it replay unchanged.
	if err := workflow.SetUpdateHandler(ctx, ToolReleaseUpdate, r.release); err != nil {
		return ToolStatus{}, err
	}
	work, cancelWork := workflow.WithCancel(ctx)
	r.cancelWork = cancelWork
	req, pol := r.in.Request, r.in.Request.Policy
	log := workflow.GetLogger(ctx)

	var code tool.Code
	var msg string
	if pol.Escalated() {
		// §18.5.3: ELEVATED and above are logged; at WARN from PRIVILEGED up.
		logf := log.Info
		if pol.NeedsApproval() {
			logf = log.Warn
		}
		logf("tool call above standard privileges", "call_id", req.CallID, "tool", req.ToolName, "provider", req.ProviderID,
			"privilege_level", pol.Privilege.String(), "caller", r.in.Caller)
		r.local(ctx, "RecordToolEscalation", r.endRecord(""))
	}
	if r.in.Approval != nil || (pol.NeedsApproval() && !r.in.PreApproved) {
		code, msg = r.approve(work)
	}
	var res activities.RunToolResult
	if code == "" && !r.cancelled {
		res, code, msg = r.execute(work)
	}
	if r.providerGone != "" && !r.cancelled {
		// The provider agent stopped, even while the call awaited its approval.
		code, msg = tool.CodeInterrupted, r.goneMessage()
	}
	if r.cancelled {
		// The cancel stored the final frame and answered already.
		code = tool.CodeCancelled
	} else if code != "" {
		fin := r.finish(ctx, tool.Summary{Status: "error", ErrorCode: string(code), Message: msg})
		if !fin.Created && fin.Summary.Status == "ok" {
			// The result was stored before the failure was noticed (a worker lost after it
			// stored the final frame): the stored result stands.
			code, msg = "", ""
		}
		r.st.FinalFrame = fin.FinalFrame
	} else {
		r.st.FinalFrame = res.FinalFrame
	}
	r.st.State, r.st.Code, r.st.Message = "done", code, msg
	r.local(ctx, "RecordToolEnd", r.endRecord(code))
	if r.in.ReplyTo != "" {
		r.reply(ctx)
	}
	// A cancel in flight finishes before the run closes, so its caller gets its answer.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return r.st, err
	}
	// A call that failed, was refused or was cancelled fails the run (ToolOutcome).
	return toolEnd(ctx, r.st)
}

// versionApprovalArguments marks runs whose TOOL_PRIVILEGE_ESCALATION invocation shows the
// call's arguments among its facts, so that the operator sees what would run.
const versionApprovalArguments = "tool-approval-arguments"

// approvalArgumentsMax bounds the arguments an approval's facts show; the rest is cut, and
// the fact says so.
const approvalArgumentsMax = 2048

// approve waits for an operator's decision of a PRIVILEGED or FULL_ACCESS call, through a
// HITL invocation with reason TOOL_PRIVILEGE_ESCALATION (§18.5.3); anything but an approval
// refuses the call with PERMISSION_DENIED.
func (r *toolRun) approve(ctx workflow.Context) (tool.Code, string) {
	req := r.in.Request
	facts := []string{
		fmt.Sprintf("%s asks to run tool %s of provider %s at privilege level %s (§18.5.3)", orScheduler(r.in.Caller), req.ToolName, req.ProviderID, req.Policy.Privilege),
		fmt.Sprintf("call %s, network policy %s, arguments of %d bytes", req.CallID, req.Policy.Network, len(req.Args)),
	}
	if workflow.GetVersion(ctx, versionApprovalArguments, workflow.DefaultVersion, 1) >= 1 {
		// The arguments are in this run's input already, so the invocation reveals nothing
		// its history does not hold.
		facts = append(facts, approvalArguments(req.Args))
	}
	var timeout time.Duration
	if a := r.in.Approval; a != nil {
		// The frontend named the invocation and told the caller; no side effect needed.
		r.st.HitlID, timeout = a.InvocationID, a.Timeout
		facts = append(facts, "it needs approval for "+strings.Join(a.Reasons, " and "))
	} else if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&r.st.HitlID); err != nil {
		return tool.CodeInternal, err.Error()
	}
	r.st.State = "awaiting_approval"
	inv := hitl.Invocation{
		InvocationID: r.st.HitlID, ReasonType: commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION.String(),
		CorrelationID: req.CallID, RequestedBy: ToolWorkflowID(req.CallID),
		Subject:         hitl.Subject{AgentID: r.in.Caller},
		Context:         hitl.Context{Facts: facts},
		ProposedActions: []string{"approve: run the call at " + req.Policy.Privilege.String() + " with network policy " + string(req.Policy.Network), "deny: refuse it (PERMISSION_DENIED)"},
		Fallback:        hitl.Fallback{Policy: hitl.DenyByDefault},
		Timeout:         timeout,
	}
	out, err := RequestHITL(ctx, inv)
	r.st.State = "running"
	switch {
	case r.cancelled:
		return "", ""
	case err != nil:
		return tool.CodePermissionDenied, "the privilege escalation was not approved: its HITL invocation failed: " + err.Error()
	case out.Decision == hitl.Approve:
		return "", ""
	case out.Decision == hitl.Modify:
		if workflow.GetVersion(ctx, versionApprovalModify, workflow.DefaultVersion, 1) < 1 {
			return "", "" // runs recorded before: a modification approved the call as asked
		}
		return r.modify(ctx, out)
	case out.Fallback:
		return tool.CodePermissionDenied, fmt.Sprintf("the privilege escalation was not approved: HITL invocation %s fell back to %s", r.st.HitlID, out.FallbackPolicy)
	}
	return tool.CodePermissionDenied, fmt.Sprintf("the privilege escalation was refused by %s (%s) in HITL invocation %s", out.DecidedBy, out.Decision, r.st.HitlID)
}

// versionApprovalModify marks runs in which an operator's Modify decision replaces the call's
// arguments with the modification, checked against the tool's input schema first.
const versionApprovalModify = "tool-approval-modify"

// modify applies an operator's Modify decision: its patch, a JSON object, becomes the call's
// arguments once it validates against the tool's input schema as the caller's arguments did;
// a patch that does not is refused with VALIDATION_ERROR and the call does not run.
func (r *toolRun) modify(ctx workflow.Context, out hitl.Outcome) (tool.Code, string) {
	var acts *activities.Activities
	req := r.in.Request
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 10},
	})
	var refusal string
	in := activities.ValidateToolArgsInput{ProviderID: req.ProviderID, ToolName: req.ToolName, ContentType: req.ContentType, Args: out.Patch}
	if err := workflow.ExecuteLocalActivity(lctx, acts.ValidateToolArgs, in).Get(ctx, &refusal); err != nil {
		return tool.CodeInternal, "checking the operator's modified arguments failed: " + err.Error()
	}
	if refusal != "" {
		return tool.CodeValidation, fmt.Sprintf("the arguments %s modified in HITL invocation %s are refused: %s", out.DecidedBy, r.st.HitlID, refusal)
	}
	r.in.Request.Args = out.Patch
	return "", ""
}

// approvalArguments is the fact that shows a call's arguments to the operator who approves
// it: their text, cut at approvalArgumentsMax bytes (on a character boundary).
func approvalArguments(args []byte) string {
	if !utf8.Valid(args) {
		return fmt.Sprintf("arguments: %d bytes that are not text", len(args))
	}
	if len(args) <= approvalArgumentsMax {
		return hitl.ArgumentsFact + string(args)
	}
	cut := approvalArgumentsMax
	for cut > 0 && !utf8.RuneStart(args[cut]) {
		cut--
	}
	return fmt.Sprintf("arguments (the first %d of %d bytes): %s…", cut, len(args), args[:cut])
}

// execute runs the tool as an activity on the provider's task queue. Each attempt is bounded
// by the policy's deadline (TOOL_TIMEOUT, or WALL_TIMEOUT when the wall budget is shorter),
// the whole execution by the wall budget (WALL_TIMEOUT, §18.5.1); only an idempotent tool has
// retries (tool.Effective), so a non-idempotent one whose worker died ends INTERRUPTED and is
// never run twice (§18.3).
func (r *toolRun) execute(ctx workflow.Context) (activities.RunToolResult, tool.Code, string) {
	if r.in.ProviderAgent != "" {
		return r.executeOnAgent(ctx)
	}
	pol := r.in.Request.Policy
	deadline, deadlineCode := pol.Deadline()
	opts := workflow.ActivityOptions{
		TaskQueue:              r.in.TaskQueue,
		Summary:                ToolSummary(r.in),
		StartToCloseTimeout:    deadline,
		ScheduleToStartTimeout: ToolScheduleToStart,
		HeartbeatTimeout:       ToolHeartbeatTimeout,
		WaitForCancellation:    true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        tool.RetryInitialInterval,
			BackoffCoefficient:     pol.BackoffCoefficient(),
			MaximumInterval:        tool.RetryMaximumInterval,
			MaximumAttempts:        int32(pol.MaximumAttempts()),
			NonRetryableErrorTypes: finalCodes(),
		},
	}
	if pol.BudgetWall > 0 {
		opts.ScheduleToCloseTimeout = pol.BudgetWall
	}
	actx := workflow.WithActivityOptions(ctx, opts)
	var runner *activities.ToolRunner
	var res activities.RunToolResult
	err := workflow.ExecuteActivity(actx, runner.RunTool, activities.RunToolInput{Request: r.in.Request}).Get(ctx, &res)
	if err == nil {
		return res, "", ""
	}
	code, msg := classifyToolError(err, deadline, deadlineCode, pol)
	return res, code, msg
}

// executeOnAgent routes the call to the agent that provides the tool as a TOOL_CALL envelope
// (§18.2) and waits for its answer — its frames and its final TOOL_RESULT or TOOL_ERROR are
// stored by the scheduler's inbox as they come — or for the policy's deadline. A call that
// ends without the agent's answer (deadline, cancel) tells the agent so, best effort.
func (r *toolRun) executeOnAgent(ctx workflow.Context) (activities.RunToolResult, tool.Code, string) {
	var acts *activities.Activities
	provided := workflow.GetSignalChannel(ctx, ToolProvidedSignal)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 5 * time.Second, MaximumAttempts: 10},
		Summary:             summary("offer the call of tool %s to provider agent %s (§18.2)", r.in.Request.ToolName, r.in.ProviderAgent),
	})
	in := activities.OfferToolCallInput{Request: r.in.Request, Caller: r.in.Caller, Agent: r.in.ProviderAgent}
	if err := workflow.ExecuteActivity(actx, acts.OfferToolCall, in).Get(ctx, nil); err != nil {
		if r.cancelled {
			return activities.RunToolResult{}, "", ""
		}
		if r.providerGone != "" {
			return activities.RunToolResult{}, tool.CodeInterrupted, r.goneMessage()
		}
		return activities.RunToolResult{}, tool.CodeInternal, fmt.Sprintf("the call could not be routed to provider agent %s: %v", r.in.ProviderAgent, err)
	}
	deadline, deadlineCode := r.in.Request.Policy.Deadline()
	var got ToolProvided
	received := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(provided, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, &got)
		received = true
	})
	sel.AddFuture(workflow.NewTimerWithOptions(ctx, deadline, workflow.TimerOptions{
		Summary: summary("deadline of agent %s's answer: %s", r.in.ProviderAgent, deadlineCode)}), func(workflow.Future) {})
	sel.Select(ctx)
	if received {
		return activities.RunToolResult{FinalFrame: got.FinalFrame}, got.Code, got.Message
	}
	if r.providerGone != "" {
		// The agent is gone: there is nobody to tell.
		return activities.RunToolResult{}, tool.CodeInterrupted, r.goneMessage()
	}
	// The deadline or a cancel: the agent should stop working on it.
	nctx, _ := workflow.NewDisconnectedContext(ctx)
	nctx = workflow.WithActivityOptions(nctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 5},
	})
	if err := workflow.ExecuteActivity(nctx, acts.NotifyToolCancelled, in).Get(nctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("the provider agent was not told that the call ended", "call_id", in.Request.CallID, "err", err)
	}
	if r.cancelled {
		return activities.RunToolResult{}, "", ""
	}
	return activities.RunToolResult{}, deadlineCode, fmt.Sprintf("provider agent %s did not answer within %s", r.in.ProviderAgent, deadline)
}

// cancel is ToolCancelUpdate's handler (§18.6): it stores the final frame marking the
// cancellation and the partial results — unless the call already has one — then stops the
// approval wait or the running attempt, whose provider is told to stop.
func (r *toolRun) cancel(ctx workflow.Context, c ToolCancel) (ToolCancelResult, error) {
	if r.st.State == "done" || r.cancelled {
		return ToolCancelResult{Code: tool.CodeAlreadyCompleted, Message: "the call already ended", FinalFrame: r.st.FinalFrame}, nil
	}
	msg := "cancelled by " + orScheduler(c.By)
	if c.Reason != "" {
		msg += ": " + c.Reason
	}
	fin := r.finish(ctx, tool.Summary{Status: "cancelled", ErrorCode: string(tool.CodeCancelled), Message: msg, CancelledBy: c.By})
	if !fin.Created {
		return ToolCancelResult{Code: tool.CodeAlreadyCompleted, Message: "the call already ended", FinalFrame: fin.FinalFrame}, nil
	}
	r.cancelled = true
	r.st.FinalFrame = fin.FinalFrame
	r.cancelWork()
	return ToolCancelResult{Code: tool.CodeCancelled, Message: "cancellation initiated; the final frame is stored", FinalFrame: fin.FinalFrame}, nil
}

// release is ToolReleaseUpdate's handler (§8.4): the agent rel names stopped. A call it made
// is cancelled as a cancel would (the final frame is stored at once); a call routed to it
// as the tool's provider ends INTERRUPTED once the wait for its answer is stopped. A call
// that already ended, or that the agent has no part in, releases nothing.
func (r *toolRun) release(ctx workflow.Context, rel activities.AgentRelease) (activities.ReleaseOutcome, error) {
	if r.st.State == "done" || r.cancelled || r.providerGone != "" {
		return activities.ReleaseOutcome{Outcome: "already ended"}, nil
	}
	why := "agent " + rel.AgentID + " stopped: " + rel.Why
	switch {
	case rel.As == activities.AsCaller:
		res, err := r.cancel(ctx, ToolCancel{By: protocol.SchedulerID, Reason: why})
		return activities.ReleaseOutcome{Released: res.Code == tool.CodeCancelled, Outcome: string(res.Code), Note: res.Message}, err
	case rel.As == activities.AsProvider && rel.AgentID == r.in.ProviderAgent:
		r.providerGone = rel.Why
		r.cancelWork()
		return activities.ReleaseOutcome{Released: true, Outcome: string(tool.CodeInterrupted), Note: r.goneMessage()}, nil
	}
	return activities.ReleaseOutcome{Outcome: "not the agent's call"}, nil
}

// goneMessage is the message of a call whose provider agent stopped before answering.
func (r *toolRun) goneMessage() string {
	return fmt.Sprintf("provider agent %s stopped before answering (%s); whether it did the work is unknown", r.in.ProviderAgent, r.providerGone)
}

// finish stores the call's final frame through a local activity, retried until it is stored.
func (r *toolRun) finish(ctx workflow.Context, sum tool.Summary) activities.FinishToolResult {
	var acts *activities.Activities
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumInterval: 5 * time.Second},
	})
	var out activities.FinishToolResult
	in := activities.FinishToolInput{CallID: r.in.Request.CallID, Summary: sum}
	if err := workflow.ExecuteLocalActivity(lctx, acts.FinishTool, in).Get(ctx, &out); err != nil {
		// Only the run's own end gets here (the retry policy has no limit).
		workflow.GetLogger(ctx).Error("storing a tool call's final frame failed", "call_id", in.CallID, "err", err)
	}
	return out
}

// reply sends the calling agent the envelope of the call's end (§18.2), retried for a while:
// the result is stored whatever happens to the envelope.
func (r *toolRun) reply(ctx workflow.Context) {
	var acts *activities.Activities
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second, MaximumAttempts: 20},
	})
	in := activities.ReplyToolInput{CallID: r.in.Request.CallID, To: r.in.ReplyTo, Correlation: r.in.Correlation}
	if err := workflow.ExecuteActivity(actx, acts.ReplyTool, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("the call's TOOL_RESULT/TOOL_ERROR envelope was not delivered", "call_id", in.CallID, "to", in.To, "err", err)
	}
}

// local runs a best-effort bookkeeping local activity (audit records).
func (r *toolRun) local(ctx workflow.Context, name string, in activities.RecordToolEndInput) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 5},
	})
	if err := workflow.ExecuteLocalActivity(lctx, name, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("tool call bookkeeping failed", "activity", name, "call_id", in.CallID, "err", err)
	}
}

func (r *toolRun) endRecord(code tool.Code) activities.RecordToolEndInput {
	req := r.in.Request
	return activities.RecordToolEndInput{CallID: req.CallID, Caller: r.in.Caller, ProviderID: req.ProviderID, ToolName: req.ToolName,
		Code: string(code), Privilege: req.Policy.Privilege.String()}
}

// finalCodes are the codes never retried: every code that is not transient.
func finalCodes() []string {
	var out []string
	for _, c := range tool.Codes() {
		if !c.Transient() {
			out = append(out, string(c))
		}
	}
	return out
}

// classifyToolError maps the activity's failure to a §18.3 code and message.
func classifyToolError(err error, deadline time.Duration, deadlineCode tool.Code, pol tool.Policy) (tool.Code, string) {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		c := tool.Code(app.Type())
		if !c.Valid() {
			c = tool.CodeInternal
		}
		if c == tool.CodeToolTimeout && deadlineCode == tool.CodeWallTimeout {
			c = tool.CodeWallTimeout
		}
		return c, app.Message()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		switch to.TimeoutType() {
		case enums.TIMEOUT_TYPE_START_TO_CLOSE:
			if deadlineCode == tool.CodeWallTimeout {
				return tool.CodeWallTimeout, fmt.Sprintf("the call ran past its wall budget of %s (§18.5.1)", deadline)
			}
			return tool.CodeToolTimeout, fmt.Sprintf("the attempt ran past its timeout of %s", deadline)
		case enums.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
			return tool.CodeWallTimeout, fmt.Sprintf("the call, retries included, ran past its wall budget of %s (§18.5.1)", pol.BudgetWall)
		case enums.TIMEOUT_TYPE_SCHEDULE_TO_START:
			return tool.CodeInternal, fmt.Sprintf("no worker of the provider's task queue took the call within %s: is a worker for this provider running?", ToolScheduleToStart)
		case enums.TIMEOUT_TYPE_HEARTBEAT:
			if pol.MaxRetries == 0 {
				return tool.CodeInterrupted, "the tool's worker was lost mid-call; the tool is not idempotent, so it is not run again (§18.3) and whether it took effect is unknown"
			}
			return tool.CodeInterrupted, fmt.Sprintf("the tool's worker was lost mid-call and the %d retries are spent", pol.MaxRetries)
		}
	}
	if temporal.IsCanceledError(err) {
		return tool.CodeCancelled, "the call was cancelled"
	}
	return tool.CodeInternal, err.Error()
}
