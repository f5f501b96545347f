package loadgen

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/handoff"
)

// handoffs is the Handoffs pattern: originator → target.
type handoffs struct {
	l      *ledger
	prefix string
	from   *handoff.Client
	to     *handoff.Client
	target *sdk.Agent
	dir    directorypb.DirectoryServiceClient
	mu     sync.Mutex
	// taken are the request_ids the target completed.
	taken map[string]bool
}

func (h *handoffs) setup(ctx context.Context, r *runner) error {
	h.prefix = r.cfg.AgentPrefix + "-" + string(Handoffs) + "-"
	h.taken = map[string]bool{}
	from, err := r.agent(ctx, "handoff-from", nil)
	if err != nil {
		return err
	}
	to, err := r.agent(ctx, "handoff-to", nil)
	if err != nil {
		return err
	}
	h.from, h.to, h.target = handoff.New(from), handoff.New(to), to
	h.dir = directorypb.NewDirectoryServiceClient(from.ClientConn())
	// Both read their inboxes: the handoff's events arrive there.
	r.read(ctx, from, nil, nil)
	r.read(ctx, to, nil, nil)
	r.background(func() { h.serve(ctx) })
	return nil
}

// serve is the target: it polls its pending handoffs (GetPendingHandoffs, what an agent
// recovering from a failure does too), and accepts and completes each.
func (h *handoffs) serve(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		pending, err := h.to.Pending(actx)
		cancel()
		if err != nil {
			attempt++
			h.l.errored()
		} else {
			attempt = 0
		}
		for _, p := range pending {
			id := p.Request.GetRequestId()
			if !strings.HasPrefix(id, h.prefix) {
				continue
			}
			h.mu.Lock()
			again := h.taken[id]
			h.mu.Unlock()
			if again {
				// Offered again after the target completed it: it would take the work over
				// twice.
				h.l.double(id)
				continue
			}
			if h.take(ctx, id) {
				h.mu.Lock()
				h.taken[id] = true
				h.mu.Unlock()
			}
		}
		if !sleep(ctx, max(backoff(attempt), 100*time.Millisecond)) {
			return
		}
	}
}

// take accepts and completes one handoff; false when it could not.
func (h *handoffs) take(ctx context.Context, id string) bool {
	if err := retry(ctx, h.l, func(ctx context.Context) error { _, err := h.to.Accept(ctx, id); return err }); err != nil {
		return false
	}
	err := retry(ctx, h.l, func(ctx context.Context) error { _, err := h.to.Complete(ctx, id); return err })
	return err == nil
}

func (h *handoffs) op(ctx context.Context, id string) {
	o := h.l.start(id)
	err := retry(ctx, h.l, func(ctx context.Context) error {
		_, err := h.from.Request(ctx, handoff.Request{ID: id, To: h.target.ID(), Reason: "load generator", Context: []byte(`{"op":"` + id + `"}`)})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			h.l.note("refused", 1)
			h.l.refuse(id)
		}
		return
	}
	h.l.ack(id)
	pollUntil(ctx, o, func() bool {
		switch st := h.state(ctx, id); st {
		case "COMPLETED":
			h.l.complete(id)
		case "REJECTED", "EXPIRED", "CANCELLED", "FAILED":
			h.l.note("ended_"+st, 1)
			h.l.fail(id)
		default:
			return false
		}
		return true
	})
}

// state is the handoff's state by enum name, "" when it could not be read.
func (h *handoffs) state(ctx context.Context, id string) string {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	e, err := h.dir.GetHandoff(actx, &directorypb.GetHandoffRequest{RequestId: id})
	if err != nil {
		return ""
	}
	return e.GetState()
}

// probe marks the unfinished handoffs still PENDING or ACCEPTED as in flight.
func (h *handoffs) probe(ctx context.Context) {
	for _, id := range h.l.unfinished() {
		st := h.state(ctx, id)
		h.l.setInFlight(id, st == handoffpb.HandoffStatus_PENDING.String() || st == handoffpb.HandoffStatus_ACCEPTED.String())
	}
}
