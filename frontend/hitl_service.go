package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
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
