package router

import (
	"context"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The default retentions of the records housekeeping prunes (docs/reliability.md, "Retention").
const (
	// DefaultAuditRetention is how long audit events are kept (§19).
	DefaultAuditRetention = 30 * 24 * time.Hour
	// DefaultMessageRetention is how long a finished message is kept (§11).
	DefaultMessageRetention = 7 * 24 * time.Hour
	// DefaultHandoffRetention is how long ended handoffs and their fences are kept (§17.6).
	DefaultHandoffRetention = 7 * 24 * time.Hour
	// DefaultHITLRetention is how long decided HITL invocations are kept (§15).
	DefaultHITLRetention = 7 * 24 * time.Hour
	// DefaultToolCallRetention is how long ended tool calls and their frames are kept (§18.2).
	DefaultToolCallRetention = 7 * 24 * time.Hour
)

// retentionBatch bounds the rows one retention statement deletes: small enough that no
// statement holds many row locks or runs long, large enough that a day's backlog clears in a
// few hundred statements.
const retentionBatch = 500

// PruneMetrics is implemented by a Metrics that counts the rows retention deletes
// (metrics.Router); the router calls it when the installed Metrics has it.
type PruneMetrics interface {
	// Pruned counts n rows of kind deleted.
	Pruned(kind string, n int)
}

// pruned reports n rows of kind deleted to the metrics, if they count them.
func (r *Router) pruned(kind string, n int) {
	if pm, ok := r.metrics.(PruneMetrics); ok && n > 0 {
		pm.Pruned(kind, n)
	}
}

// retentionKind is one kind of record retention prunes: the label of its metric, how long it
// is kept (negative: forever) and the store's batch deletion.
type retentionKind struct {
	kind  string
	keep  time.Duration
	prune func(ctx context.Context, cutoff time.Time, limit int) (int, error)
}

// retentionKinds lists the kinds RetainOnce prunes, with the retentions of the configuration.
// A finished message is kept at least as long as its idempotency entry and its delivery row,
// which name it.
func (r *Router) retentionKinds() []retentionKind {
	rt := r.st.Retention()
	msgKeep := r.cfg.MessageRetention
	if msgKeep >= 0 {
		msgKeep = max(msgKeep, r.cfg.DedupWindow, r.cfg.StreamRetention)
	}
	return []retentionKind{
		{"dead_letters", r.cfg.DLQRetention, rt.PruneDeadLetters},
		{"audit_events", r.cfg.AuditRetention, rt.PruneAudit},
		{"messages", msgKeep, rt.PruneMessages},
		// Fences before handoffs: a fence outlives its handoff's row only when the handoff
		// was deleted in the same pass, which PruneFences treats as ended anyway.
		{"handoff_fences", r.cfg.HandoffRetention, rt.PruneFences},
		{"handoffs", r.cfg.HandoffRetention, rt.PruneHandoffs},
		{"hitl_invocations", r.cfg.HITLRetention, rt.PruneHITL},
		{"tool_calls", r.cfg.ToolCallRetention, rt.PruneToolCalls},
	}
}

// RetainOnce deletes, batch by batch, every finished record older than its kind's retention
// and returns how many of each kind it deleted. It stops at the first failure (returning it
// with the counts so far) or when ctx ends. Several frontends sharing a store may run it at
// once: the store hands each row to one of them.
func (r *Router) RetainOnce(ctx context.Context) (map[string]int, error) {
	now := time.Now()
	out := map[string]int{}
	for _, k := range r.retentionKinds() {
		if k.keep < 0 {
			continue // kept forever
		}
		cutoff := now.Add(-k.keep)
		for {
			n, err := k.prune(ctx, cutoff, retentionBatch)
			out[k.kind] += n
			r.pruned(k.kind, n)
			if err != nil {
				return out, err
			}
			if n < retentionBatch || ctx.Err() != nil {
				break
			}
		}
	}
	return out, ctx.Err()
}

// runRetention runs RetainOnce every housekeepingEvery until ctx ends, apart from the sweep so
// that a long backlog of deletions never delays an ACK timeout. Each pass that deleted
// something is audited (retention.pruned), with its counts.
func (r *Router) runRetention(ctx context.Context) {
	t := time.NewTicker(housekeepingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		counts, err := r.RetainOnce(ctx)
		if err != nil && ctx.Err() == nil {
			slog.Default().Warn("retention failed; the next pass retries", "error", err)
		}
		details := map[string]any{}
		for k, n := range counts {
			if n > 0 {
				details[k] = n
			}
		}
		if len(details) > 0 {
			r.sink.Record(ctx, audit.Event{Actor: protocol.SchedulerID, Type: "retention.pruned", Details: details})
		}
		if n := counts["dead_letters"]; n > 0 {
			r.sink.Record(ctx, audit.Event{Actor: protocol.SchedulerID, Type: "dlq.purged", Details: map[string]any{"entries": n, "retention": r.cfg.DLQRetention.String()}})
		}
	}
}
