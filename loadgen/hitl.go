package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// hitlWaitAttempt bounds one HitlService.Decide call's wait for the decision.
const hitlWaitAttempt = 30 * time.Second

// hitls is the HITL pattern: an agent asks, an operator approves.
type hitls struct {
	l      *ledger
	asker  *sdk.Agent
	admin  hitladminpb.HitlAdminServiceClient
	token  string
	mu     sync.Mutex
	invIDs map[string]string // op (its idempotency key) → the invocation it named
}

func (h *hitls) setup(ctx context.Context, r *runner) error {
	var err error
	if h.asker, err = r.agent(ctx, "hitl-asker", nil); err != nil {
		return err
	}
	r.read(ctx, h.asker, nil, nil)
	h.token = r.cfg.OperatorToken
	h.invIDs = map[string]string{}
	// The operator's calls carry no agent identity: a connection of the asker's is only
	// transport here, every call authenticates with the operator's bearer token.
	h.admin = hitladminpb.NewHitlAdminServiceClient(h.asker.ClientConn())
	return nil
}

// ask raises the invocation (or joins it, with the same key) and returns the open call once
// the server named the invocation.
func (h *hitls) ask(ctx context.Context, id string) (string, grpc.ClientStream, error) {
	question, _ := json.Marshal(hitl.Context{Facts: []string{"load generator operation " + id}})
	ctx = metadata.AppendToOutgoingContext(ctx, wire.IdempotencyKey, id)
	cs, err := h.asker.ClientConn().NewStream(ctx, &grpc.StreamDesc{StreamName: "Decide", ServerStreams: false}, hitlpb.HitlService_Decide_FullMethodName)
	if err != nil {
		return "", nil, err
	}
	if err := cs.SendMsg(&hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL, Context: question,
		ProposedActions: []string{"approve", "deny"}, Priority: 5}); err != nil {
		return "", nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return "", nil, err
	}
	md, err := cs.Header()
	if ids := md.Get(wire.HITLInvocationIDHeader); err == nil && len(ids) == 1 {
		return ids[0], cs, nil
	}
	var dec hitlpb.HitlDecision
	if err := cs.RecvMsg(&dec); err != nil {
		return "", nil, err
	}
	return "", nil, errors.New("HitlService.Decide named no invocation")
}

// approve decides the invocation as the operator, repeating the same decision until it is
// answered; NotFound is repeated too, for the moment before the wait recorded it.
func (h *hitls) approve(ctx context.Context, inv string) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.token), attemptTimeout)
		_, err := h.admin.Decide(actx, &hitladminpb.DecideRequest{InvocationId: inv, Decision: "approve", Rationale: "load generator approves"})
		cancel()
		if err == nil || status.Code(err) == codes.FailedPrecondition {
			// Applied, or decided already (an earlier attempt of ours, or a fallback the
			// asker will report).
			return
		}
		if !transient(ctx, err) && status.Code(err) != codes.NotFound {
			h.l.note("decide_refused_"+status.Code(err).String(), 1)
			return
		}
		if status.Code(err) == codes.NotFound {
			// Not an error: the wait has not recorded the invocation yet.
			h.l.note("decide_early", 1)
		} else {
			h.l.errored()
		}
		if !sleep(ctx, backoff(attempt)) {
			return
		}
	}
}

func (h *hitls) op(ctx context.Context, id string) {
	h.l.start(id)
	decided := false
	for attempt := 0; ctx.Err() == nil; attempt++ {
		// One call's wait is bounded by hitlWaitAttempt, not attemptTimeout: the decision may
		// take a while. A call with an idempotency key may give up and come back, which
		// docs/hitl.md allows: the call again returns the decision from the store once it is
		// made. The soak saw one wait, begun right after a PostgreSQL crash, not return for
		// minutes although the operator's decision was recorded; asking again answers it.
		cctx, cancel := context.WithTimeout(ctx, hitlWaitAttempt)
		inv, cs, err := h.ask(cctx, id)
		if err == nil {
			h.l.ack(id)
			h.mu.Lock()
			prev := h.invIDs[id]
			h.invIDs[id] = inv
			h.mu.Unlock()
			if prev != "" && prev != inv {
				h.l.double(id)
			}
			if !decided {
				h.approve(ctx, inv)
				decided = true
			}
			var dec hitlpb.HitlDecision
			err = cs.RecvMsg(&dec)
			cancel()
			if err == nil {
				var out hitl.Outcome
				if json.Unmarshal(dec.GetDecisionPayload(), &out) == nil && out.Decision == hitl.Approve && !out.Fallback {
					h.l.complete(id)
				} else {
					h.l.note("not_approved", 1)
					h.l.fail(id)
				}
				return
			}
		} else {
			cancel()
		}
		if !transient(ctx, err) {
			if ctx.Err() == nil {
				h.l.note("refused_"+status.Code(err).String(), 1)
				h.l.refuse(id)
			}
			return
		}
		h.l.errored()
		if attempt == 0 {
			h.l.retried()
		}
		if !sleep(ctx, backoff(attempt)) {
			return
		}
	}
}

// probe marks the unfinished invocations still pending as in flight.
func (h *hitls) probe(ctx context.Context) {
	for _, id := range h.l.unfinished() {
		h.mu.Lock()
		inv := h.invIDs[id]
		h.mu.Unlock()
		if inv == "" {
			continue
		}
		actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.token), attemptTimeout)
		s, err := h.admin.GetInvocation(actx, &hitladminpb.GetInvocationRequest{InvocationId: inv})
		cancel()
		h.l.setInFlight(id, err == nil && s.GetStatus() == "pending")
	}
}
