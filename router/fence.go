package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Fencing (§17.6): "the originating agent MUST NOT continue work on the transferred context
// after handoff completion". When a handoff completes, its workflow fences the originator on
// the handoff's correlation (store.Handoffs.Fence), and from then on the router refuses every
// message the originator sends on that correlation with permission_denied — recorded, NACKed
// and audited like any refusal (§13: never a silent drop).
//
// The check is on the path of every message, so it must not cost a store round trip. Every
// frontend holds the fences in memory and polls the store's fences generation every
// fenceRefresh (as frontend/auth.go does for keys); when it changes the cache is rebuilt:
//
//   - The store lists its fences (store.Handoffs.ListFences): the cache holds all of them and is
//     complete: while it is fresh (the last poll succeeded within fenceStale) a message is
//     checked in memory only, whatever its correlation.
//   - Otherwise the cache remembers the answer of store.Handoffs.Fenced for each (correlation,
//     agent) it was asked about until the generation changes: the first message of a producer
//     on a correlation costs one lookup, the following ones none.
//
// A stale cache (the poll has failed for longer than fenceStale, or Run is not running) is
// never trusted for an absence: every check then asks the store, so a fence set through
// another frontend is never missed for longer than about fenceRefresh. A fence is removed only
// by retention (store.Retention.PruneFences), long after its handoff ended, and that bumps the
// generation: a cache still holding a pruned fence refuses a little longer, the safe side.

// fenceRefresh is how often the fences generation is polled.
const fenceRefresh = 250 * time.Millisecond

// fenceStale is the age of the last successful poll after which the cache is not trusted.
const fenceStale = 4 * fenceRefresh

// fenceCacheBound bounds the per-pair answers of an incomplete cache; past it they are
// dropped and asked again.
const fenceCacheBound = 100_000

type fenceKey struct{ correlation, agent string }

// fenceCache is the router's copy of the fences.
type fenceCache struct {
	mu sync.RWMutex
	// gen is the store's fences generation the cache reflects; polled says when it was last
	// read successfully (zero: never, or the poll is failing).
	gen    int64
	polled time.Time
	// epoch counts rebuilds, so a lookup that started before one does not write into the
	// rebuilt cache what it read before the change.
	epoch uint64
	// complete: fences holds every fence (ListFences loaded them at gen).
	complete bool
	fences   map[fenceKey]store.Fence
	// clear holds pairs the store said were not fenced at gen (incomplete caches only).
	clear map[fenceKey]struct{}
}

// Fenced reports whether agentID is fenced on correlation (§17.6): it handed the
// correlation's context to another agent in a completed handoff. It reads the router's fence
// cache, asking the store only when the cache cannot answer (see fence.go).
func (r *Router) Fenced(ctx context.Context, correlation, agentID string) (store.Fence, bool, error) {
	if correlation == "" || agentID == "" {
		return store.Fence{}, false, nil
	}
	k := fenceKey{correlation, agentID}
	c := &r.fenceCache
	c.mu.RLock()
	fresh := !c.polled.IsZero() && time.Since(c.polled) < fenceStale
	f, fenced := c.fences[k]
	_, clear := c.clear[k]
	epoch, complete := c.epoch, c.complete // read under the lock: refreshFences rewrites both
	c.mu.RUnlock()
	if fenced {
		return f, true, nil
	}
	if fresh && (complete || clear) {
		return store.Fence{}, false, nil
	}
	f, fenced, err := r.st.Handoffs().Fenced(ctx, correlation, agentID)
	if err != nil {
		return store.Fence{}, false, fmt.Errorf("look up the fence of %s on %s: %w", agentID, correlation, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case fenced:
		if c.fences == nil {
			c.fences = map[fenceKey]store.Fence{}
		}
		c.fences[k] = f
	case c.epoch == epoch && fresh:
		if c.clear == nil || len(c.clear) > fenceCacheBound {
			c.clear = map[fenceKey]struct{}{}
		}
		c.clear[k] = struct{}{}
	}
	return f, fenced, nil
}

// checkFence refuses a message whose producer is fenced on its correlation. ACKs and control
// traffic to the scheduler are not work on the context and never reach it (Send).
func (r *Router) checkFence(ctx context.Context, s *sending) (*protocol.Error, error) {
	f, fenced, err := r.Fenced(ctx, s.env.GetCorrelationId(), s.env.GetProducerId())
	if err != nil || !fenced {
		return nil, err
	}
	return FenceError(f), nil
}

// FenceError is the refusal of a fenced agent's work on its fence's correlation (§17.6).
func FenceError(f store.Fence) *protocol.Error {
	return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "fenced: correlation %s was handed to %s by handoff %s (§17.6)",
		f.Correlation, f.NewOwner, f.RequestID)
}

// refreshFences polls the fences generation once and rebuilds the cache when it changed.
func (r *Router) refreshFences(ctx context.Context) error {
	h := r.st.Handoffs()
	gen, err := h.FencesGeneration(ctx)
	if err != nil {
		r.fenceCache.mu.Lock()
		r.fenceCache.polled = time.Time{} // stale: checks ask the store
		r.fenceCache.mu.Unlock()
		return err
	}
	c := &r.fenceCache
	c.mu.RLock()
	unchanged := !c.polled.IsZero() && gen == c.gen
	c.mu.RUnlock()
	if unchanged {
		c.mu.Lock()
		c.polled = time.Now()
		c.mu.Unlock()
		return nil
	}
	fences := map[fenceKey]store.Fence{}
	complete := false
	{
		all, err := h.ListFences(ctx)
		if err != nil {
			return err
		}
		for _, f := range all {
			fences[fenceKey{f.Correlation, f.AgentID}] = f
		}
		complete = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !complete {
		// Keep the fences known so far: a fence is never removed.
		for k, f := range c.fences {
			fences[k] = f
		}
	}
	c.gen, c.polled, c.complete, c.fences, c.clear = gen, time.Now(), complete, fences, nil
	c.epoch++
	return nil
}

// watchFences keeps the fence cache fresh until ctx ends.
func (r *Router) watchFences(ctx context.Context) {
	t := time.NewTicker(fenceRefresh)
	defer t.Stop()
	failing := false
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.refreshFences(pctx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			slog.Default().Warn("router: cannot read the fences generation; every message's fence is read from the store until it can", "error", err)
			failing = true
		case err == nil && failing:
			slog.Default().Info("router: fences generation readable again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
