// Package outbox relays the entries that store writes promised to Temporal (store.Outbox):
// the signals and workflow starts that must follow a committed write even when Temporal is
// unreachable at that moment or the writing process dies right after the commit.
//
// Every path that writes to the store and then signals or starts a workflow follows one
// pattern: write the state and a store.OutboxEntry in one transaction, call Relay.Deliver for the
// in-line first attempt (so the usual case costs no extra latency), and answer the caller
// from the store write alone — the entry is durable whether or not that attempt succeeded.
// Relay.Run, in every sw4rm process, claims entries whose writer's lease ran out or whose
// attempt failed and delivers them with backoff until Temporal takes them (docs/reliability.md).
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Handler delivers one kind of entry to Temporal. It must be idempotent: an entry is
// delivered at least once (a process can die after Temporal took it and before it was
// removed). An error wrapped with Permanent drops the entry; any other error retries it.
type Handler func(ctx context.Context, h store.OutboxEntry) error

// permanentError marks an entry that no retry can deliver.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent wraps err to say that retrying the entry cannot succeed (an undecodable
// payload, a workflow that no longer wants it): the relay drops it and records why.
func Permanent(err error) error { return &permanentError{err: err} }

// Config tunes a Relay; zero fields take the defaults.
type Config struct {
	// PollInterval is how often Run looks for due entries (default 500 ms).
	PollInterval time.Duration
	// ClaimLease is how long a claimed entry is held by the claiming relay (default 30 s);
	// it must exceed AttemptTimeout so that two relays never attempt one entry at once.
	ClaimLease time.Duration
	// AttemptTimeout bounds one delivery attempt by Run (default 10 s).
	AttemptTimeout time.Duration
	// InlineTimeout bounds Deliver's in-line attempt (default 3 s): a caller waiting for an
	// answer is held at most this long when Temporal is unreachable.
	InlineTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay after a failed attempt, which doubles with
	// each attempt (defaults 250 ms and 15 s).
	MinBackoff, MaxBackoff time.Duration
	// Batch is how many entries one claim takes (default 64).
	Batch int
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PollInterval, 500*time.Millisecond)
	def(&c.ClaimLease, 30*time.Second)
	def(&c.AttemptTimeout, 10*time.Second)
	def(&c.InlineTimeout, 3*time.Second)
	def(&c.MinBackoff, 250*time.Millisecond)
	def(&c.MaxBackoff, 15*time.Second)
	if c.Batch <= 0 {
		c.Batch = 64
	}
	return c
}

// Relay delivers entries to Temporal through the handlers registered for their kinds.
type Relay struct {
	st   store.Outbox
	cfg  Config
	log  *slog.Logger
	sink *audit.Sink

	mu       sync.RWMutex
	handlers map[string]Handler
	// coalescing are the kinds registered with Coalesce; held their entries waiting for
	// a later one, by kind and workflow.
	coalescing map[string]Coalescing
	held       map[string]*held
}

// New builds a relay over the store's outbox; sink records drops and late deliveries (§19).
func New(st store.Outbox, cfg Config, log *slog.Logger, sink *audit.Sink) *Relay {
	return &Relay{st: st, cfg: cfg.withDefaults(), log: log, sink: sink, handlers: map[string]Handler{}}
}

// Handle registers the handler of one kind of entry; call before Run and Deliver.
func (r *Relay) Handle(kind string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[kind] = h
}

// Deliver makes the in-line first attempt of entries the caller has just written (and so
// holds the lease of, see store.OutboxLease), in order. Delivered ones are removed; a failed
// one is left to Run with a backoff, and so are the ones after it, so that one workflow's
// entries keep their order. The error, if any, is the first failure's: the entries are
// durable either way, so a caller logs it and answers from its store write.
func (r *Relay) Deliver(ctx context.Context, hs ...store.OutboxEntry) error {
	if len(hs) == 0 {
		return nil
	}
	if len(hs) == 1 {
		r.mu.RLock()
		c, ok := r.coalescing[hs[0].Kind]
		r.mu.RUnlock()
		if ok {
			return r.coalesce(ctx, c, hs[0])
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.InlineTimeout)
	defer cancel()
	done, err := r.attempt(ctx, hs, r.cfg.InlineTimeout)
	if len(done) > 0 {
		// A failure here only means a repeated delivery later, which handlers tolerate.
		if cerr := r.st.Complete(context.WithoutCancel(ctx), done); cerr != nil {
			r.log.Warn("entries delivered but not removed; they will be delivered again", "count", len(done), "error", cerr)
		}
	}
	return err
}

// attempt delivers hs in order until one fails; it returns the IDs delivered (or dropped)
// and the failure, after scheduling the failed entry and those behind it for a retry.
func (r *Relay) attempt(ctx context.Context, hs []store.OutboxEntry, timeout time.Duration) ([]string, error) {
	var done []string
	for i, h := range hs {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := r.deliverOne(actx, h)
		cancel()
		var perm *permanentError
		switch {
		case err == nil:
			done = append(done, h.ID)
			if h.Attempts > 0 {
				r.record(ctx, h, "outbox.delivered", slog.LevelInfo, map[string]any{"attempts": h.Attempts + 1})
			}
			continue
		case errors.As(err, &perm):
			done = append(done, h.ID)
			r.record(ctx, h, "outbox.dropped", slog.LevelError, map[string]any{"error": err.Error(), "attempts": h.Attempts + 1})
			continue
		}
		delay := r.backoff(h.Attempts + 1)
		if h.Attempts == 0 {
			r.record(ctx, h, "outbox.delayed", slog.LevelWarn, map[string]any{"error": err.Error(), "retry_in_ms": delay.Milliseconds()})
		}
		rctx := context.WithoutCancel(ctx)
		if rerr := r.st.Retry(rctx, h.ID, delay, err.Error()); rerr != nil {
			r.log.Warn("could not schedule an entry's retry; its lease runs out instead", "entry_id", h.ID, "error", rerr)
		}
		for _, rest := range hs[i+1:] {
			// Behind a failure: keep their order by waiting with it.
			if rerr := r.st.Retry(rctx, rest.ID, delay, "waiting behind entry "+h.ID); rerr != nil {
				r.log.Warn("could not schedule an entry's retry; its lease runs out instead", "entry_id", rest.ID, "error", rerr)
			}
		}
		return done, fmt.Errorf("hand %s to Temporal: %w", h.Kind, err)
	}
	return done, nil
}

func (r *Relay) deliverOne(ctx context.Context, h store.OutboxEntry) error {
	r.mu.RLock()
	fn := r.handlers[h.Kind]
	r.mu.RUnlock()
	if fn == nil {
		// A process of a newer version may have written it: leave it for one that knows it.
		return fmt.Errorf("no handler for entry kind %q in this process", h.Kind)
	}
	return fn(traceContext(ctx, h), h)
}

// backoff is the delay after the n-th failed attempt: doubling from MinBackoff up to
// MaxBackoff, with up to 20 % jitter so that relays recovering together spread out.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.MinBackoff
	for i := 1; i < n && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

func (r *Relay) record(ctx context.Context, h store.OutboxEntry, typ string, level slog.Level, details map[string]any) {
	details["entry_id"], details["kind"], details["workflow_id"] = h.ID, h.Kind, h.WorkflowID
	if r.sink == nil {
		r.log.Log(ctx, level, typ, "details", details)
		return
	}
	r.sink.Record(context.WithoutCancel(ctx), audit.Event{CorrelationID: h.WorkflowID, Actor: "scheduler", Type: typ, Level: level, Details: details})
}

// Run delivers due entries until ctx ends: those whose writer's in-line attempt failed, and
// those whose writer died before making it (their lease ran out).
func (r *Relay) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.dropHeld()
			return
		case <-t.C:
		}
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("entry relay: claim failed", "error", err)
		}
	}
}

// RunOnce claims and delivers one batch of due entries and reports how many it delivered.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	hs, err := r.st.Claim(ctx, r.cfg.ClaimLease, r.cfg.Batch)
	if err != nil || len(hs) == 0 {
		return 0, err
	}
	done, _ := r.attempt(ctx, hs, r.cfg.AttemptTimeout) // a failure is scheduled and recorded
	if len(done) > 0 {
		if err := r.st.Complete(context.WithoutCancel(ctx), done); err != nil {
			return len(done), fmt.Errorf("remove delivered entries: %w", err)
		}
	}
	return len(done), nil
}
