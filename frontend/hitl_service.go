package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// keyedInvocations is the UUID namespace of invocation ids derived from idempotency keys.
var keyedInvocations = uuid.MustParse("6f1c3e0a-5b8d-4d2e-9a67-0c4f3b2d1e95")

// questionMemo is the memo field of a hitl/ workflow raised by HitlService.Decide that holds
// the digest of the question, so a retry under the same key can be checked against it.
const questionMemo = "sw4rm_question_sha256"

// hitlService serves the canonical sw4rm.hitl.HitlService (§15).
type hitlService struct {
	hitlpb.UnimplementedHitlServiceServer
	s *Server
}

// Decide raises a HITL invocation as workflow hitl/<invocation_id> and blocks until it is
// decided — by an operator through any door, or by the fallback at the deadline. The deadline
// is the call's own deadline when it has one (less a second to answer in), else the
// configured HITL timeout. The context bytes are read as the §15.1 context JSON
// ({"facts":[...],"diffs":[...],"risk_notes":[...],"prior_attempts":[...],"inference":{...}})
// when they are one, else kept raw.
//
// With the metadata wire.IdempotencyKey the invocation id is derived from the key, and
// a call whose invocation exists attaches to it: it returns the outcome when it is decided
// (from the store's projection, so even while Temporal is unreachable) and otherwise waits
// for it. A key already used for a different question is refused.
func (h *hitlService) Decide(ctx context.Context, req *hitlpb.HitlInvocation) (*hitlpb.HitlDecision, error) {
	if perr := hitl.ValidateReasonType(req.GetReasonType()); perr != nil {
		return nil, perr
	}
	key, err := idempotencyKey(ctx)
	if err != nil {
		return nil, err
	}
	inv, perr := h.invocation(ctx, req, key)
	if perr != nil {
		return nil, perr
	}
	_ = grpc.SendHeader(ctx, metadata.Pairs(wire.HITLInvocationIDHeader, inv.InvocationID))
	return h.raise(ctx, inv, key)
}

// invocation builds the invocation a Decide request raises: its id derived from the caller's
// key when there is one, its context read as the §15.1 JSON when it is that, else kept raw.
func (h *hitlService) invocation(ctx context.Context, req *hitlpb.HitlInvocation, key string) (hitl.Invocation, *protocol.Error) {
	inv := hitl.Invocation{
		InvocationID: uuid.NewString(), ReasonType: req.GetReasonType().String(), ProposedActions: req.GetProposedActions(),
		Priority: req.GetPriority(), Timeout: h.s.cfg.HITLTimeout, RequestedBy: "grpc",
	}
	if key != "" {
		inv.InvocationID = keyedInvocationID(h.caller(ctx), key)
	}
	if raw := req.GetContext(); len(raw) > 0 {
		var c hitl.Context
		if json.Unmarshal(raw, &c) == nil {
			inv.Context = c
		} else {
			inv.Context.Raw = raw
		}
	}
	// Without a key nobody can collect the outcome after the caller gives up, so the caller's
	// deadline is the invocation's. With one the caller has said it will come back: its
	// deadline bounds only this call's wait, and the invocation keeps the server's timeout.
	if dl, ok := ctx.Deadline(); ok && key == "" {
		if d := time.Until(dl) - time.Second; d > 0 && (inv.Timeout == 0 || d < inv.Timeout) {
			inv.Timeout = d
		}
	}
	inv.CorrelationID = hitl.WorkflowID(inv.InvocationID)
	if err := inv.Validate(); err != nil {
		return hitl.Invocation{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%v", err)
	}
	return inv, nil
}

// raise starts (or, under a key, attaches to) the invocation's workflow and waits for its
// outcome.
func (h *hitlService) raise(ctx context.Context, inv hitl.Invocation, key string) (*hitlpb.HitlDecision, error) {
	question := questionDigest(inv)
	retry := retryAdvice(key, inv.InvocationID)
	checked := false // whether the question was compared with the existing invocation's
	if key != "" {
		// A retry whose invocation is decided is answered from the projection: it needs no
		// Temporal, which may be the very thing the first call lost.
		if rec, err := h.s.store.HITL().GetInvocation(ctx, inv.InvocationID); err == nil {
			var prev hitl.Invocation
			if err := json.Unmarshal(rec.Invocation, &prev); err == nil {
				if questionDigest(prev) != question {
					return nil, keyReused(key, inv.InvocationID)
				}
				checked = true
			}
			if rec.Status == store.HITLDecided {
				return decisionOf(inv.InvocationID, rec.Outcome)
			}
		}
	}
	opts := workflows.HitlStartOptions(inv.InvocationID, h.s.cfg.TaskQueue)
	opts.Memo = map[string]any{questionMemo: question}
	if key != "" {
		// Attach to the invocation the key names, running or completed, instead of raising a
		// second one: ExecuteWorkflow then returns the existing run.
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
		opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	}
	run, err := h.s.temporal.ExecuteWorkflow(ctx, opts, hitl.WorkflowType, workflows.HitlWaitInput{Invocation: inv})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "the caller stopped waiting while invocation %s was being raised; %s", inv.InvocationID, retry)
		}
		return nil, status.Errorf(codes.Unavailable, "internal_error: could not raise HITL invocation %s (is Temporal reachable?): %v; %s", inv.InvocationID, err, retry)
	}
	if key != "" && !checked {
		same, err := h.sameQuestion(ctx, inv.InvocationID, question)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "internal_error: could not read HITL invocation %s: %v; %s", inv.InvocationID, err, retry)
		}
		if !same {
			return nil, keyReused(key, inv.InvocationID)
		}
	}
	var out hitl.Outcome
	if err := run.Get(ctx, &out); err != nil {
		return nil, waitError(ctx, err, inv.InvocationID, retry)
	}
	payload, _ := json.Marshal(out)
	return &hitlpb.HitlDecision{Action: string(out.Decision), DecisionPayload: payload, Rationale: out.Rationale}, nil
}

// idempotencyKey reads the caller's wire.IdempotencyKey metadata (hitl.ParseIdempotencyKey),
// empty when there is none.
func idempotencyKey(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	key, perr := hitl.ParseIdempotencyKey(md.Get(wire.IdempotencyKey))
	if perr != nil {
		return "", perr
	}
	return key, nil
}

// caller names who calls HitlService.Decide, for scoping idempotency keys: the principal the
// auth interceptor proved, else the operator of a valid bearer token, else "" (anonymous,
// as every caller is when authentication is off).
func (h *hitlService) caller(ctx context.Context) string {
	if p := auth.FromContext(ctx); !p.Anonymous() {
		return p.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if token := bearerToken(md); token != "" {
		if op, ok := h.s.cfg.HITLPolicy.OperatorForToken(token); ok {
			return auth.Principal{Operator: op.Name}.String()
		}
	}
	return ""
}

// keyedInvocationID derives the invocation id of an idempotency key, scoped to its caller so
// that one caller's key cannot name — and so cannot poison — another caller's invocation
// (§23). Anonymous callers share the unscoped ids, which keeps the ids of keys used before
// keys were scoped; a key has no control characters, so the separator is unambiguous.
func keyedInvocationID(caller, key string) string {
	if caller == "" {
		return uuid.NewSHA1(keyedInvocations, []byte(key)).String()
	}
	return uuid.NewSHA1(keyedInvocations, []byte(caller+"\n"+key)).String()
}

// retryAdvice tells the caller what calling again does.
func retryAdvice(key, id string) string {
	if key != "" {
		return fmt.Sprintf("retrying with the same %s metadata returns invocation %s, waiting for its outcome if it is still open", wire.IdempotencyKey, id)
	}
	return fmt.Sprintf("invocation %s may be open or decided (sw4rm hitl history %s); a retry without %s metadata raises a new invocation — set it to make retries return the same one", id, id, wire.IdempotencyKey)
}

// questionDigest is what makes two calls the same question: everything the caller asked
// except the deadline, which each attempt derives from its own call deadline.
func questionDigest(inv hitl.Invocation) string {
	b, _ := json.Marshal(struct {
		ReasonType      string       `json:"reason_type"`
		Context         hitl.Context `json:"context"`
		ProposedActions []string     `json:"proposed_actions,omitempty"`
		Priority        int32        `json:"priority"`
	}{inv.ReasonType, inv.Context, inv.ProposedActions, inv.Priority})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keyReused refuses a key already used for a different question (as a reused message_id is
// refused, §11.2).
func keyReused(key, id string) error {
	return status.Errorf(codes.AlreadyExists, "duplicate_detected: %s %q already names invocation %s, raised for a different question; use a new key for a new question",
		wire.IdempotencyKey, key, id)
}

// sameQuestion reports whether the running or completed hitl/ workflow was raised for this
// question. A workflow without the memo (raised by a workflow, not by Decide) never is.
func (h *hitlService) sameQuestion(ctx context.Context, id, question string) (bool, error) {
	desc, err := h.s.temporal.DescribeWorkflowExecution(ctx, hitl.WorkflowID(id), "")
	if err != nil {
		return false, err
	}
	var prev string
	if p := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[questionMemo]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &prev)
	}
	return prev == question, nil
}

// decisionOf answers Decide with an outcome recorded in the store.
func decisionOf(id string, outcome []byte) (*hitlpb.HitlDecision, error) {
	var o hitl.Outcome
	if err := json.Unmarshal(outcome, &o); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "stored outcome of %s is unreadable: %v", id, err)
	}
	return &hitlpb.HitlDecision{Action: string(o.Decision), DecisionPayload: outcome, Rationale: o.Rationale}, nil
}

// waitError maps an error from waiting on a hitl/ run. Only the run's own failure is final;
// anything else — Temporal unreachable or restarting, its deadline, "workflow not found"
// while it reloads — says nothing about the invocation, which is open or already decided,
// so the caller is told to retry (with the key, the retry returns this invocation).
func waitError(ctx context.Context, err error, id, retry string) error {
	if ctx.Err() != nil {
		return status.Errorf(status.FromContextError(ctx.Err()).Code(), "the caller stopped waiting; invocation %s stays open until its deadline; %s", id, retry)
	}
	var failed *temporal.WorkflowExecutionError
	if !errors.As(err, &failed) {
		return status.Errorf(codes.Unavailable, "internal_error: lost the wait for HITL invocation %s (%v); %s", id, err, retry)
	}
	var terminated *temporal.TerminatedError
	var canceled *temporal.CanceledError
	if errors.As(err, &terminated) || errors.As(err, &canceled) {
		return status.Errorf(codes.Aborted, "HITL invocation %s was ended by an operator before any decision: %v", id, err)
	}
	return protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "HITL invocation %s failed: %v", id, err)
}

// hitlAdminService serves the extension sw4rmext.hitl.v1.HitlAdminService: listing,
// deciding and auditing invocations for authenticated operators.
type hitlAdminService struct {
	hitladminpb.UnimplementedHitlAdminServiceServer
	s *Server
}

// authenticate finds the operator making the call (§15.1, §23): the one the auth interceptor
// already proved, else the one whose bearer token the call carries. The token is checked here
// and goes no further: what leaves the frontend names the operator, never the secret.
func (h *hitlAdminService) authenticate(ctx context.Context) (hitl.Operator, error) {
	if name := auth.FromContext(ctx).Operator; name != "" {
		op, ok := h.s.cfg.HITLPolicy.Operator(name)
		if !ok {
			return hitl.Operator{}, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "operator %q is not a HITL operator (SW4RM_HITL_OPERATORS)", name)
		}
		return op, nil
	}
	op, _, err := h.s.operatorFromToken(ctx)
	return op, err
}

// operatorFromToken finds the operator whose token the call carries in the metadata
// "authorization: Bearer <token>" (§15.1, §23), and returns it with the token. Every
// operator service authenticates tokens through it.
func (s *Server) operatorFromToken(ctx context.Context) (hitl.Operator, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	token := bearerToken(md)
	if token == "" {
		return hitl.Operator{}, "", status.Error(codes.Unauthenticated, "permission_denied: an operator token is required (metadata authorization: Bearer <token>; CLI: --token or SW4RM_OPERATOR_TOKEN)")
	}
	op, ok := s.cfg.HITLPolicy.OperatorForToken(token)
	if !ok {
		return hitl.Operator{}, "", status.Error(codes.Unauthenticated, "permission_denied: the operator token is not valid")
	}
	return op, token, nil
}

func summary(r store.HITLRecord) *hitladminpb.InvocationSummary {
	s := &hitladminpb.InvocationSummary{
		InvocationId: r.InvocationID, ReasonType: r.ReasonType, Subject: r.Subject, Priority: r.Priority,
		CreatedAt: timestamppb.New(r.CreatedAt), Deadline: timestamppb.New(r.Deadline), Status: r.Status,
		InvocationJson: string(r.Invocation), OutcomeJson: string(r.Outcome), CorrelationId: r.CorrelationID,
	}
	return s
}

// ListInvocations lists pending (or all) invocations.
func (h *hitlAdminService) ListInvocations(ctx context.Context, req *hitladminpb.ListInvocationsRequest) (*hitladminpb.ListInvocationsResponse, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	f := store.HITLFilter{ReasonType: req.GetReasonType(), Limit: int(req.GetLimit())}
	if !req.GetIncludeDecided() {
		f.Status = store.HITLPending
	}
	recs, err := h.s.store.HITL().ListInvocations(ctx, f)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	out := &hitladminpb.ListInvocationsResponse{}
	for _, r := range recs {
		out.Invocations = append(out.Invocations, summary(r))
	}
	return out, nil
}

// GetInvocation returns one invocation.
func (h *hitlAdminService) GetInvocation(ctx context.Context, req *hitladminpb.GetInvocationRequest) (*hitladminpb.InvocationSummary, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	r, err := h.s.store.HITL().GetInvocation(ctx, req.GetInvocationId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "unknown invocation %q", req.GetInvocationId())
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	return summary(r), nil
}

// Decide checks the operator, the decision and the invocation's state, signals the decision
// to hitl/<invocation_id> and returns the outcome the workflow applied. The signal names the
// authenticated operator and carries an attestation by the deployment's decision key
// (hitl.Attest), never the operator's token: a signal's input stays in the workflow's
// history. A repeat of the decision that was applied is answered with it (idempotent); any
// other decision on a decided invocation is refused and changes nothing.
func (h *hitlAdminService) Decide(ctx context.Context, req *hitladminpb.DecideRequest) (*hitladminpb.DecideResponse, error) {
	op, err := h.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	d, perr := hitl.DecisionOf(req, op.Name, viaOf(ctx))
	if perr != nil {
		return nil, perr
	}
	rec, err := h.decidable(ctx, d)
	if err != nil {
		return nil, err
	}
	if rec.Status == store.HITLDecided {
		return alreadyDecided(rec, d)
	}
	return h.deliver(ctx, d)
}

// decidable reads the invocation d decides and checks that d's operator may decide it.
func (h *hitlAdminService) decidable(ctx context.Context, d hitl.Decision) (store.HITLRecord, error) {
	rec, err := h.s.store.HITL().GetInvocation(ctx, d.InvocationID)
	if errors.Is(err, store.ErrNotFound) {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "unknown invocation %q (sw4rm hitl list shows the pending ones)", d.InvocationID)
	}
	if err != nil {
		return rec, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	if err := h.s.cfg.HITLPolicy.Permit(d.Operator, rec.ReasonType); err != nil {
		return rec, status.Error(codes.PermissionDenied, err.Error())
	}
	return rec, nil
}

// deliver signals an attested decision to the invocation's workflow and returns the outcome
// it recorded.
func (h *hitlAdminService) deliver(ctx context.Context, d hitl.Decision) (*hitladminpb.DecideResponse, error) {
	if h.s.cfg.HITLDecisionKey == nil {
		return nil, status.Error(codes.FailedPrecondition, "internal_error: this server has no HITL decision key (SW4RM_HITL_DECISION_KEY_FILE), so it cannot vouch for decisions")
	}
	// A fresh attestation per attempt: repeating a decision after an error signs it again.
	signed, err := hitl.Attest(d, h.s.cfg.HITLDecisionKey, time.Now().Add(hitl.DefaultAttestationTTL))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	err = workflows.SignalHITLDecision(ctx, h.s.temporal, signed)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return h.notWaiting(ctx, d, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: could not deliver the decision (is Temporal reachable?): %v; repeating the same decision is safe", err)
	}
	rec, err := h.waitDecided(ctx, d.InvocationID)
	if err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "the decision was delivered but its outcome is not recorded yet; repeating the same decision returns it, or check with sw4rm hitl history %s", d.InvocationID)
	}
	resp, err := alreadyDecided(rec, d)
	if resp != nil {
		resp.AlreadyDecided = false // this call's decision is the one applied
	}
	return resp, err
}

// notWaiting answers a decision whose signal found no running workflow. Either the run
// finished between our read and the signal — then the outcome is reported — or Temporal,
// restarting, does not find a workflow that is still waiting: then the operator must retry,
// not be told that the invocation is over.
func (h *hitlAdminService) notWaiting(ctx context.Context, d hitl.Decision, signalErr error) (*hitladminpb.DecideResponse, error) {
	desc, err := h.s.temporal.DescribeWorkflowExecution(ctx, hitl.WorkflowID(d.InvocationID), "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, status.Errorf(codes.Unavailable, "internal_error: Temporal did not find the workflow of invocation %s (%v), which is still waiting; repeat the decision when Temporal is reachable", d.InvocationID, signalErr)
	}
	if rec, err := h.waitDecided(ctx, d.InvocationID); err == nil {
		return alreadyDecided(rec, d)
	}
	return nil, status.Errorf(codes.FailedPrecondition, "invocation %s is no longer waiting (its workflow is %s)", d.InvocationID,
		strings.ToLower(strings.TrimPrefix(desc.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")))
}

// alreadyDecided answers a decision on a decided invocation: the outcome when it is the same
// decision by the same operator, a refusal otherwise.
func alreadyDecided(rec store.HITLRecord, d hitl.Decision) (*hitladminpb.DecideResponse, error) {
	var o hitl.Outcome
	if err := json.Unmarshal(rec.Outcome, &o); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "stored outcome of %s is unreadable: %v", rec.InvocationID, err)
	}
	if o.DecidedBy == d.Operator && o.Decision == d.Decision && !o.Fallback {
		return &hitladminpb.DecideResponse{OutcomeJson: string(rec.Outcome), AlreadyDecided: true}, nil
	}
	return nil, status.Errorf(codes.FailedPrecondition, "invocation %s was already decided: %s by %s at %s (%s)",
		rec.InvocationID, o.Decision, o.DecidedBy, o.DecidedAt.UTC().Format(time.RFC3339), o.Rationale)
}

// waitDecided polls the projection until the workflow recorded the outcome (bounded).
func (h *hitlAdminService) waitDecided(ctx context.Context, id string) (store.HITLRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		rec, err := h.s.store.HITL().GetInvocation(ctx, id)
		if err == nil && rec.Status == store.HITLDecided {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return store.HITLRecord{}, ctx.Err()
		case <-t.C:
		}
	}
}

// History returns the audit trail of HITL interactions.
func (h *hitlAdminService) History(ctx context.Context, req *hitladminpb.HistoryRequest) (*hitladminpb.HistoryResponse, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	evs, err := h.s.store.Audit().List(ctx, store.AuditFilter{TypePrefix: "hitl.", Limit: 10000})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	out := &hitladminpb.HistoryResponse{}
	for _, e := range evs {
		var d struct {
			InvocationID string `json:"invocation_id"`
		}
		_ = json.Unmarshal(e.Details, &d)
		if req.GetInvocationId() != "" && d.InvocationID != req.GetInvocationId() {
			continue
		}
		out.Events = append(out.Events, &hitladminpb.AuditEvent{
			Time: timestamppb.New(e.Time), Actor: e.Actor, Type: e.Type, InvocationId: d.InvocationID, DetailsJson: string(e.Details),
		})
	}
	if lim := int(req.GetLimit()); lim > 0 && len(out.Events) > lim {
		out.Events = out.Events[len(out.Events)-lim:]
	}
	return out, nil
}
