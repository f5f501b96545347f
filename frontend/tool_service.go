package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// MaxToolArgs bounds a call's arguments, in bytes: they travel in the call's workflow
// history.
const MaxToolArgs = 256 << 10

// Stream polling: how often CallStream looks for new frames while a call runs.
const (
	toolPollMin = 5 * time.Millisecond
	toolPollMax = 50 * time.Millisecond
)

// toolService serves sw4rm.tool.ToolService (§18): each call is the workflow tool/<call_id>;
// its frames are stored as they come (store.ToolCalls), which is what Call and CallStream
// answer from.
type toolService struct {
	toolpb.UnimplementedToolServiceServer
	s *Server
}

// caller is who makes a call and for which agent: the proven principal, and the agent whose
// worktree the call runs in (and whom the ACL decides the call for).
type caller struct {
	principal auth.Principal
	// owner is recorded with the call; it, an operator or an ACL grant may stream or cancel
	// it (decideCall).
	owner string
	// agent is the agent the call is made for; "" when none is named.
	agent string
}

// callerOf proves who calls and for which agent.
func callerOf(ctx context.Context) (caller, error) {
	p := auth.FromContext(ctx)
	c := caller{principal: p, owner: p.String(), agent: strings.TrimSpace(firstMD(ctx, wire.AgentIDKey))}
	switch {
	case p.Agent != "" && c.agent != "" && c.agent != p.Agent:
		return caller{}, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "agent %s may not call tools for agent %s (%s)", p.Agent, c.agent, wire.AgentIDKey)
	case p.Agent != "":
		c.agent = p.Agent
	case p.Anonymous() && c.agent != "":
		// Authentication is off: the named agent is the owner, so that its own later calls
		// (also anonymous) can stream and cancel.
		c.owner = "agent:" + c.agent
	}
	return c, nil
}

// decideCall decides whether c may verb ("read": stream its frames or join it; "cancel")
// the recorded call rec: its caller and operators may, the agent that provides its tool may
// read it, and anyone else needs an ACL grant of its scope, tool_call:<call_id> (access.go).
func (t *toolService) decideCall(ctx context.Context, c caller, rec store.ToolCallRecord, verb string) error {
	r := resource{kind: "tool call", id: rec.CallID, scope: acl.ToolCallScope(rec.CallID)}
	if rec.Caller != "" {
		r.owners = []string{rec.Caller}
	}
	if verb == "read" && c.agent != "" && c.agent == rec.ProviderID {
		// Only an agent's own tools make it a reader: a configured provider's id is no agent.
		if d, err := t.s.store.ToolProviders().GetTool(ctx, rec.ProviderID, rec.ToolName); err == nil && d.Kind == tool.ProviderKindConnector {
			r.readers = []string{c.agent}
		}
	}
	return t.s.decideResource(ctx, c.principal, c.owner, c.agent, verb, r)
}

// prepared is a validated call, ready to start.
type prepared struct {
	in    workflows.ToolCallInput
	notes []string
}

// prepare validates a call and resolves what its workflow needs: the descriptor (§18.1),
// the arguments against the input schema, the effective policy (§18.5), the caller's
// worktree (§16) and whether policy pre-approves a privileged call.
func (t *toolService) prepare(ctx context.Context, req *toolpb.ToolCall, c caller, callID string) (prepared, *tool.Error) {
	if err := tool.ValidateCall(req, MaxToolArgs); err != nil {
		return prepared{}, asToolError(err)
	}
	rec, err := t.s.store.ToolProviders().GetTool(ctx, req.GetProviderId(), req.GetToolName())
	if errors.Is(err, store.ErrNotFound) {
		return prepared{}, tool.Errorf(tool.CodeNotFound, "provider %s offers no tool %s (ConnectorService.DescribeTools lists what it offers)", req.GetProviderId(), req.GetToolName())
	}
	if err != nil {
		return prepared{}, tool.Errorf(tool.CodeInternal, "reading the descriptor: %v", err)
	}
	providerAgent := ""
	if rec.Kind == tool.ProviderKindConnector {
		// An agent's own tools: the call is routed to it (§18.2), which needs it registered.
		if _, err := t.s.store.Registry().GetAgent(ctx, req.GetProviderId()); errors.Is(err, store.ErrNotFound) {
			return prepared{}, tool.Errorf(tool.CodeNotFound, "provider %s advertises tool %s but is not registered now: there is no agent to run it", req.GetProviderId(), req.GetToolName())
		} else if err != nil {
			return prepared{}, tool.Errorf(tool.CodeInternal, "looking up provider agent %s: %v", req.GetProviderId(), err)
		}
		providerAgent = req.GetProviderId()
	}
	d := rec.Descriptor
	if err := tool.ValidateArgs(d, req.GetContentType(), req.GetArgs()); err != nil {
		return prepared{}, asToolError(err)
	}
	pol, err := tool.Effective(req.GetPolicy(), d)
	if err != nil {
		return prepared{}, asToolError(err)
	}
	pol.Notes = tool.NoteAgentCPUBudget(pol.Notes, pol, providerAgent) // the agent enforces budget_cpu_ms: say so
	// The ACL decides on the effective policy, defaults applied: what the call would run with.
	if terr := t.s.decideTool(ctx, c, req.GetProviderId(), req.GetToolName(), pol); terr != nil {
		return prepared{}, terr
	}
	args := req.GetArgs()
	if len(strings.TrimSpace(string(args))) == 0 {
		args = []byte("{}")
	}
	wt := ""
	if c.agent != "" {
		b, err := t.s.store.Worktrees().GetBinding(ctx, c.agent)
		switch {
		case err == nil && (b.State == worktree.StateBoundHome.String() || b.State == worktree.StateBoundNonHome.String()):
			wt = b.Path
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return prepared{}, tool.Errorf(tool.CodeInternal, "reading the worktree binding of %s: %v", c.agent, err)
		}
	}
	if pol.WorktreeRequired && wt == "" {
		who := c.agent
		if who == "" {
			who = "the caller (name the agent in " + wire.AgentIDKey + ")"
		}
		return prepared{}, tool.Errorf(tool.CodeWorktreeNotBound, "tool %s needs a worktree and %s is not bound to one (§16: WorktreeService.Bind first)", req.GetToolName(), who)
	}
	replyTo, corr := "", ""
	envelope, err := tool.ParseReply(wire.ToolReplyKey, firstMD(ctx, wire.ToolReplyKey), wire.AgentIDKey, c.agent)
	if err != nil {
		return prepared{}, asToolError(err)
	}
	if envelope {
		replyTo, corr = c.agent, strings.TrimSpace(firstMD(ctx, wire.CorrelationIDKey))
		if corr == "" {
			corr = callID
		}
	}
	return prepared{
		in: workflows.ToolCallInput{
			ReplyTo: replyTo, Correlation: corr, ProviderAgent: providerAgent,
			Request: tools.Request{CallID: callID, ProviderID: req.GetProviderId(), ToolName: req.GetToolName(), ContentType: "application/json",
				Args: args, Policy: pol, Worktree: wt, MaxConcurrency: d.GetMaxConcurrency()},
			Caller:      c.owner,
			TaskQueue:   workflows.ToolTaskQueue(t.s.cfg.TaskQueue, req.GetProviderId()),
			PreApproved: t.s.cfg.preApproved(req.GetProviderId(), req.GetToolName()),
			Approval:    t.s.cfg.approval(callID, req.GetProviderId(), req.GetToolName(), pol),
		},
		notes: pol.Notes,
	}, nil
}

// approval is the approval a call waits for: none when its policy needs none
// (tool.Policy.ApprovalReasons) or the deployment pre-approves the tool.
func (c Config) approval(callID, providerID, toolName string, pol tool.Policy) *workflows.ToolApproval {
	why := pol.ApprovalReasons()
	if len(why) == 0 || c.preApproved(providerID, toolName) {
		return nil
	}
	return &workflows.ToolApproval{InvocationID: workflows.ToolApprovalID(callID), Timeout: c.ToolApprovalTimeout, Reasons: why}
}

// preApproved reports whether the deployment pre-approves PRIVILEGED and FULL_ACCESS calls of
// the tool (SW4RM_TOOL_PREAPPROVED: "provider/tool" or "provider/*" patterns).
func (c Config) preApproved(providerID, toolName string) bool {
	for _, p := range c.ToolPreApproved {
		if ok, _ := path.Match(p, providerID+"/"+toolName); ok {
			return true
		}
	}
	return false
}

// asToolError keeps a *tool.Error and wraps anything else as INTERNAL_ERROR.
func asToolError(err error) *tool.Error {
	var te *tool.Error
	if errors.As(err, &te) {
		return te
	}
	return tool.Errorf(tool.CodeInternal, "%v", err)
}

// withProvider returns req with the provider_id it left empty: the one provider that offers
// its tool (tool.ResolveProvider refuses none or several), so a client calling by name alone
// gets the call it meant, recorded under that provider.
func (t *toolService) withProvider(ctx context.Context, req *toolpb.ToolCall) (*toolpb.ToolCall, error) {
	all, err := t.s.store.ToolProviders().ListTools(ctx, "")
	if err != nil {
		return nil, toolStatus(req.GetCallId(), tool.Errorf(tool.CodeInternal, "listing the tool providers: %v", err))
	}
	var offering []string
	for _, rec := range all {
		if rec.Descriptor.GetToolName() == req.GetToolName() {
			offering = append(offering, rec.ProviderID)
		}
	}
	id, err := tool.ResolveProvider(req.GetToolName(), offering)
	if err != nil {
		return nil, toolStatus(req.GetCallId(), asToolError(err))
	}
	named := proto.CloneOf(req)
	named.ProviderId = id
	return named, nil
}

// begin validates and records a call and starts its workflow; a call_id already recorded
// for the same owner joins that call (the workflow is started again if a crash lost the
// start: the start is idempotent).
func (t *toolService) begin(ctx context.Context, req *toolpb.ToolCall) (string, error) {
	c, err := callerOf(ctx)
	if err != nil {
		return "", err
	}
	if req.GetProviderId() == "" && req.GetToolName() != "" {
		if req, err = t.withProvider(ctx, req); err != nil {
			return "", err
		}
	}
	fresh := ""
	if req.GetCallId() == "" {
		fresh = tool.CallIDPrefix + uuid.NewString()
	}
	callID, err := tool.AssignCallID(req.GetCallId(), fresh)
	if err != nil {
		return "", toolStatus(req.GetCallId(), asToolError(err))
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.CallIDHeader, callID))
	p, terr := t.prepare(ctx, req, c, callID)
	if terr != nil {
		t.s.sink.Record(ctx, auditToolRefused(callID, req, c, terr))
		return "", toolStatus(callID, terr)
	}
	if len(p.notes) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wire.ToolPolicyNoteHeader, strconv.QuoteToASCII(strings.Join(p.notes, "; "))))
	}
	if p.in.Approval != nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HITLInvocationIDHeader, p.in.Approval.InvocationID))
	}
	start, err := bridge.NewOutboxEntry(workflows.OutboxToolStart, workflows.ToolWorkflowID(callID), workflows.ToolStartPayload{Input: p.in})
	if err != nil {
		return "", internalf("%v", err)
	}
	start = outbox.Stamp(ctx, start) // a late delivery continues this call's trace
	// The record and the workflow's start are one store write: a recorded call always runs,
	// whatever fails next (the relay starts it once Temporal takes it).
	rec, created, err := t.s.store.ToolCalls().CreateCall(ctx, store.ToolCallRecord{CallID: callID, Caller: c.owner, ProviderID: req.GetProviderId(), ToolName: req.GetToolName()}, start)
	if err != nil {
		return "", failed("recording the tool call", err)
	}
	if !created {
		// The same call again (a client retrying): join it; its workflow was promised when
		// it was recorded.
		if err := t.decideCall(ctx, c, rec, "read"); err != nil {
			return "", protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "call_id %s is another caller's call", callID)
		}
		if rec.ProviderID != req.GetProviderId() || rec.ToolName != req.GetToolName() {
			return "", protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "call_id %s is a call of %s/%s", callID, rec.ProviderID, rec.ToolName)
		}
		return callID, nil
	}
	if err := t.s.relay.Deliver(ctx, start); err != nil {
		// Stored all the same: the relay starts the workflow once Temporal takes it, and the
		// caller's wait below sees its frames then.
		t.s.log.Warn("tool call stored; its workflow starts when Temporal is reachable", "call_id", callID, "error", err)
	}
	return callID, nil
}

// Call runs a tool and answers its final frame, or the ToolError of a call that failed, was
// refused or was cancelled as a gRPC status (toolStatus) (§18.2, §18.3).
func (t *toolService) Call(ctx context.Context, req *toolpb.ToolCall) (*toolpb.ToolFrame, error) {
	callID, err := t.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	// The run's result is a long poll on Temporal: no store polling while the tool runs.
	// A run not started yet (its outbox entry still pending) or unreachable falls back to
	// waiting for the stored final frame.
	var res workflows.ToolCallResult
	if err := t.s.temporal.GetWorkflow(ctx, workflows.ToolWorkflowID(callID), "").Get(ctx, &res); err != nil && ctx.Err() != nil {
		return nil, err
	}
	final, err := t.waitFinal(ctx, callID)
	if err != nil {
		return nil, err
	}
	if te := frameError(final); te != nil {
		return nil, toolStatus(callID, te)
	}
	return final, nil
}

// waitFinal waits for a call's final frame in the store.
func (t *toolService) waitFinal(ctx context.Context, callID string) (*toolpb.ToolFrame, error) {
	wait := toolPollMin
	for {
		rec, err := t.s.store.ToolCalls().GetCall(ctx, callID)
		if err != nil {
			return nil, failed("reading the tool call", err)
		}
		if rec.Final {
			fs, err := t.s.store.ToolCalls().Frames(ctx, callID, rec.Frames-1, 1)
			if err != nil || len(fs) != 1 {
				return nil, failed("reading the final frame", errors.Join(err, store.ErrNotFound))
			}
			return frameProto(fs[0]), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, toolPollMax)
	}
}

// frameError is the ToolError a final frame's summary records, nil for a call that succeeded.
func frameError(f *toolpb.ToolFrame) *tool.Error {
	var sum tool.Summary
	if err := json.Unmarshal(f.GetSummary(), &sum); err != nil || sum.Status == "ok" {
		return nil
	}
	c := tool.Code(sum.ErrorCode)
	if !c.Valid() {
		c = tool.CodeInternal
	}
	return &tool.Error{Code: c, Msg: sum.Message}
}

func frameProto(f store.ToolFrameRecord) *toolpb.ToolFrame {
	return &toolpb.ToolFrame{CallId: f.CallID, FrameNo: f.FrameNo, Final: f.Final, ContentType: f.ContentType, Data: f.Data, Summary: f.Summary}
}

// CallStream runs a tool and streams its frames as they are stored; the final frame (final,
// with a JSON summary of how the call ended and of the partial results before it) always
// ends the stream, which then closes OK whatever the outcome — the summary says it (§18.2,
// §18.6). With sw4rm-resume-after it resumes a call already made after the given frame_no.
func (t *toolService) CallStream(req *toolpb.ToolCall, ss grpc.ServerStreamingServer[toolpb.ToolFrame]) error {
	ctx := ss.Context()
	callID, after, err := t.streamOf(ctx, req, ss)
	if err != nil {
		return err
	}
	if err := ss.SendHeader(nil); err != nil {
		return err
	}
	return t.sendFrames(ctx, ss, callID, after)
}

// streamOf is the call a CallStream streams and the frame it streams after: a call already
// made, with sw4rm-resume-after, else a new one.
func (t *toolService) streamOf(ctx context.Context, req *toolpb.ToolCall, ss grpc.ServerStreamingServer[toolpb.ToolFrame]) (string, uint64, error) {
	v := strings.TrimSpace(firstMD(ctx, wire.ResumeAfterKey))
	if v == "" {
		callID, err := t.begin(ctx, req)
		return callID, 0, err
	}
	after, err := tool.ParseResumeAfter(wire.ResumeAfterKey, v)
	if err != nil {
		return "", 0, toolStatus(req.GetCallId(), asToolError(err))
	}
	callID, err := t.resumable(ctx, req.GetCallId())
	if err != nil {
		return "", 0, err
	}
	_ = ss.SetHeader(metadata.Pairs(wire.CallIDHeader, callID))
	return callID, after, nil
}

// sendFrames streams the call's stored frames after frame after, as they come, up to and
// including the final one.
func (t *toolService) sendFrames(ctx context.Context, ss grpc.ServerStreamingServer[toolpb.ToolFrame], callID string, after uint64) error {
	ss, stop := keepAlive(ss, t.s.cfg.StreamKeepAlive)
	defer stop()
	wait := toolPollMin
	for {
		fs, err := t.s.store.ToolCalls().Frames(ctx, callID, after, 256)
		if err != nil {
			return failed("reading the call's frames", err)
		}
		for _, f := range fs {
			if err := ss.Send(frameProto(f)); err != nil {
				return err
			}
			after = f.FrameNo
			if f.Final {
				return nil
			}
		}
		if len(fs) > 0 {
			wait = toolPollMin
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, toolPollMax)
	}
}

// resumable checks that a call to resume exists and is the caller's.
func (t *toolService) resumable(ctx context.Context, callID string) (string, error) {
	c, err := callerOf(ctx)
	if err != nil {
		return "", err
	}
	if err := tool.ValidateCallID(callID); err != nil {
		return "", toolStatus(callID, asToolError(err))
	}
	rec, err := t.s.store.ToolCalls().GetCall(ctx, callID)
	if errors.Is(err, store.ErrNotFound) {
		return "", toolStatus(callID, tool.Errorf(tool.CodeNotFound, "no call %s to resume", callID))
	}
	if err != nil {
		return "", failed("reading the tool call", err)
	}
	if err := t.decideCall(ctx, c, rec, "read"); err != nil {
		return "", err
	}
	return callID, nil
}

// Cancel cancels a call (§18.6) and answers CANCELLED — the call's final frame, marking the
// cancellation and its partial results, is stored when it answers — NOT_FOUND for an
// unknown call, or ALREADY_COMPLETED. Only the call's owner or an operator may cancel it.
func (t *toolService) Cancel(ctx context.Context, req *toolpb.ToolCall) (*toolpb.ToolError, error) {
	callID := req.GetCallId()
	c, err := callerOf(ctx)
	if err != nil {
		return nil, err
	}
	if done, err := t.cancellable(ctx, c, callID); done != nil || err != nil {
		return done, err
	}
	res, err := update[workflows.ToolCancelResult](ctx, t.s.temporal, client.UpdateWorkflowOptions{
		WorkflowID: workflows.ToolWorkflowID(callID), UpdateName: workflows.ToolCancelUpdate, Args: []any{workflows.ToolCancel{By: c.owner}},
	})
	switch {
	case classify(err) == temporalNotFound:
		// The call was recorded but its workflow never started (the frontend died between
		// the two) or it already closed: the store decides.
		return t.cancelStored(ctx, c, callID)
	case err != nil:
		return nil, failed("cancelling the tool call", err)
	}
	return toolAnswer(callID, res.Code, res.Message), nil
}

// toolAnswer is Cancel's answer about call callID.
func toolAnswer(callID string, c tool.Code, msg string) *toolpb.ToolError {
	return &toolpb.ToolError{CallId: callID, ErrorCode: string(c), Message: msg}
}

// cancellable answers a Cancel that needs no workflow — no call_id, an unknown call, a call
// that already ended — or refuses another caller's call; (nil, nil) lets the cancel go on.
func (t *toolService) cancellable(ctx context.Context, c caller, callID string) (*toolpb.ToolError, error) {
	if callID == "" {
		return toolAnswer(callID, tool.CodeNotFound, "no call_id: name the call to cancel"), nil
	}
	rec, err := t.s.store.ToolCalls().GetCall(ctx, callID)
	if errors.Is(err, store.ErrNotFound) {
		return toolAnswer(callID, tool.CodeNotFound, fmt.Sprintf("no call %s", callID)), nil
	}
	if err != nil {
		return nil, failed("reading the tool call", err)
	}
	if err := t.decideCall(ctx, c, rec, "cancel"); err != nil {
		return nil, err
	}
	if rec.Final {
		return toolAnswer(callID, tool.CodeAlreadyCompleted, fmt.Sprintf("call %s already ended", callID)), nil
	}
	return nil, nil
}

// cancelStored cancels a call that has no running workflow by storing its final frame,
// unless one is stored already.
func (t *toolService) cancelStored(ctx context.Context, c caller, callID string) (*toolpb.ToolError, error) {
	sum := tool.Summary{Status: "cancelled", ErrorCode: string(tool.CodeCancelled), Message: "cancelled by " + c.owner, CancelledBy: c.owner}
	_, created, err := t.s.store.ToolCalls().Finish(ctx, callID, "application/json", []byte(`{"error_code":"CANCELLED"}`), func(frames, bytes uint64) []byte {
		sum.Frames, sum.Bytes, sum.Partial = frames, bytes, frames > 0
		return sum.JSON()
	})
	if err != nil {
		return nil, failed("cancelling the tool call", err)
	}
	if !created {
		return toolAnswer(callID, tool.CodeAlreadyCompleted, fmt.Sprintf("call %s already ended", callID)), nil
	}
	return toolAnswer(callID, tool.CodeCancelled, "cancelled; the final frame is stored"), nil
}

// AuditToolCallRefused records a call refused before it started: who, which tool, the code.
const AuditToolCallRefused = "tool.call_refused"

func auditToolRefused(callID string, req *toolpb.ToolCall, c caller, te *tool.Error) audit.Event {
	return audit.Event{CorrelationID: callID, Actor: c.owner, AgentID: c.agent, Type: AuditToolCallRefused,
		Details: map[string]any{"call_id": callID, "provider_id": req.GetProviderId(), "tool_name": req.GetToolName(), "error_code": string(te.Code), "reason": te.Msg}}
}
