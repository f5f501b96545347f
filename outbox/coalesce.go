package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// Coalescing lets the in-line attempt of one kind of entry wait a moment for a later entry
// of the same kind bound for the same workflow, so that both reach Temporal in one call: an
// ACK's RECEIVED held until the FULFILLED that a fast agent sends moments later costs the
// workflow one signal and one workflow task instead of two.
type Coalescing struct {
	// Linger is the longest an entry that may wait is held before it goes alone.
	Linger time.Duration
	// MayWait reports whether an entry may be held for a later one (e.g. an ACK's
	// RECEIVED); an entry that may not is delivered at once, with the held ones before it.
	MayWait func(store.OutboxEntry) bool
	// Deliver hands entries of the kind bound for one workflow to Temporal in one call, in
	// the order given. Like a Handler it must be idempotent.
	Deliver func(ctx context.Context, es []store.OutboxEntry) error
}

// held is the entries of one kind and workflow waiting for a later one.
type held struct {
	es    []store.OutboxEntry
	timer *time.Timer
	// traceParent is the trace of the call that wrote the first entry, for the delivery the
	// timer makes with no caller's context.
	traceParent string
}

// Coalesce registers kind's delivery with coalescing; it is also kind's Handler, for the
// entries Run claims (one at a time: they are late already). Call before Run and Deliver.
func (r *Relay) Coalesce(kind string, c Coalescing) {
	r.Handle(kind, func(ctx context.Context, h store.OutboxEntry) error { return c.Deliver(ctx, []store.OutboxEntry{h}) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.coalescing == nil {
		r.coalescing = map[string]Coalescing{}
		r.held = map[string]*held{}
	}
	r.coalescing[kind] = c
}

// coalesce makes the in-line attempt of h, an entry of a coalescing kind: held if it may
// wait, else delivered together with the entries held for its workflow. Held entries stay
// durable and leased (store.OutboxLease, far longer than any Linger), so a process that dies
// while holding them leaves them to another relay's Run.
func (r *Relay) coalesce(ctx context.Context, c Coalescing, h store.OutboxEntry) error {
	key := h.Kind + "\x00" + h.WorkflowID
	r.mu.Lock()
	g := r.held[key]
	if c.MayWait(h) {
		if g == nil {
			g = &held{traceParent: telemetry.TraceParent(ctx)}
			r.held[key] = g
			g.timer = time.AfterFunc(c.Linger, func() { r.flushHeld(key, g, c) })
		}
		g.es = append(g.es, h)
		r.mu.Unlock()
		return nil
	}
	var batch []store.OutboxEntry
	if g != nil {
		// Stopped or already firing: either way this delivery takes the held entries, and
		// flushHeld finds the group gone.
		g.timer.Stop()
		delete(r.held, key)
		batch = g.es
	}
	r.mu.Unlock()
	return r.deliverBatch(ctx, c, append(batch, h))
}

// flushHeld delivers a group whose linger ran out, unless a later entry took it meanwhile.
func (r *Relay) flushHeld(key string, g *held, c Coalescing) {
	r.mu.Lock()
	if r.held[key] != g {
		r.mu.Unlock()
		return
	}
	delete(r.held, key)
	r.mu.Unlock()
	if err := r.deliverBatch(telemetry.WithTraceParent(context.Background(), g.traceParent), c, g.es); err != nil {
		r.log.Warn("held outbox entries not delivered; the relay retries them", "kind", g.es[0].Kind, "workflow_id", g.es[0].WorkflowID, "error", err)
	}
}

// deliverBatch makes one attempt at es and removes them, or schedules their retry in order.
func (r *Relay) deliverBatch(ctx context.Context, c Coalescing, es []store.OutboxEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.InlineTimeout)
	defer cancel()
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	// Run's claims have no caller's context: the first entry's stamp, if any, carries the trace.
	err := c.Deliver(traceContext(ctx, es[0]), es)
	var perm *permanentError
	switch {
	case err == nil:
	case errors.As(err, &perm):
		for _, e := range es {
			r.record(ctx, e, "outbox.dropped", slog.LevelError, map[string]any{"error": err.Error(), "attempts": e.Attempts + 1})
		}
	default:
		delay := r.backoff(1)
		for _, e := range es {
			r.record(ctx, e, "outbox.delayed", slog.LevelWarn, map[string]any{"error": err.Error(), "retry_in_ms": delay.Milliseconds()})
			if rerr := r.st.Retry(context.WithoutCancel(ctx), e.ID, delay, err.Error()); rerr != nil {
				r.log.Warn("could not schedule an entry's retry; its lease runs out instead", "entry_id", e.ID, "error", rerr)
			}
		}
		return err
	}
	if cerr := r.st.Complete(context.WithoutCancel(ctx), ids); cerr != nil {
		r.log.Warn("entries delivered but not removed; they will be delivered again", "count", len(ids), "error", cerr)
	}
	return nil
}

// dropHeld stops the in-line delivery of the entries still held, as the process stops: they
// are durable and leased, and a relay claims them once the lease has run out.
func (r *Relay) dropHeld() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, g := range r.held {
		g.timer.Stop()
		delete(r.held, key)
	}
}
