package router

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// sweepBatch bounds the work of one sweep step.
const sweepBatch = 100

// housekeepingEvery is how often Run prunes stream rows, idempotency entries and dead letters.
const housekeepingEvery = time.Minute

// Run enforces the router's timers until ctx ends: ACK timeouts (§11), TTL expiry, response
// deadlines (004 §1) and the retention of stream rows, idempotency entries and dead letters.
// Every frontend runs it; the store hands each expired item to exactly one of them, so the
// timeouts hold with any number of frontends sharing the store. It also runs the writer of
// control-traffic confirmations (see controlConfirms), which defers them only while Run runs.
func (r *Router) Run(ctx context.Context) {
	written := make(chan struct{})
	go func() {
		defer close(written)
		r.confirms.run(ctx, r.st.Messages())
	}()
	defer func() { <-written }() // Run returns once the last confirmations are written
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	lastHousekeeping := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.SweepOnce(ctx); err != nil && ctx.Err() == nil {
			slog.Default().Warn("router sweep failed", "error", err)
		}
		if time.Since(lastHousekeeping) > housekeepingEvery {
			lastHousekeeping = time.Now()
			r.housekeeping(ctx)
		}
	}
}

// SweepOnce runs one sweep step; Run calls it periodically.
func (r *Router) SweepOnce(ctx context.Context) error {
	for {
		expired, err := r.st.Messages().Expire(ctx, r.cfg.AckTimeout, sweepBatch)
		if err != nil {
			return err
		}
		for _, e := range expired {
			if err := r.expired(ctx, e); err != nil {
				return err
			}
		}
		if len(expired) < sweepBatch {
			break
		}
	}
	for {
		due, err := r.st.Messages().ExpirePendingResponses(ctx, sweepBatch)
		if err != nil {
			return err
		}
		for _, p := range due {
			if err := r.retryOrFailRequest(ctx, p); err != nil {
				return err
			}
		}
		if len(due) < sweepBatch {
			return nil
		}
	}
}

// expired tells the producer about a timeout or TTL expiry and dead-letters what is done for.
func (r *Router) expired(ctx context.Context, e store.ExpiredMessage) error {
	rec := e.Record
	r.sink.Record(ctx, observe.Event{CorrelationID: rec.CorrelationID, Actor: protocol.SchedulerID, Type: "message.state",
		AgentID: rec.RecipientID, MessageID: rec.MessageID, Level: slog.LevelWarn,
		Details: map[string]any{"state": rec.State.String(), "error_code": rec.ErrorCode.String(), "note": rec.Note, "retry_count": rec.Envelope.GetRetryCount()}})
	nack := func() error {
		return r.nack(ctx, rec.ProducerID, rec.CorrelationID, rec.MessageID, protocol.StageForState(rec.State), rec.ErrorCode, rec.Note)
	}
	in := deadLetterInput{env: rec.Envelope, route: rec.RecipientID, code: rec.ErrorCode, reason: rec.Note, state: rec.State, firstSeen: rec.CreatedAt}
	switch {
	case rec.ErrorCode == commonpb.ErrorCode_TTL_EXPIRED:
		in.class = store.DLQTTLExpired
	case int(rec.Envelope.GetRetryCount()) >= r.cfg.MaxRetries:
		in.class = store.DLQRetriesExhausted
		in.reason = fmt.Sprintf("%s; retry budget of %d exhausted", rec.Note, r.cfg.MaxRetries)
	default:
		return nack() // the producer may retry (§11: TIMED_OUT → RETRYING)
	}
	// Dead-letter first: a producer that hears of the failure finds the message in the DLQ.
	if err := r.deadLetter(ctx, in); err != nil {
		return err
	}
	return nack()
}

// housekeeping applies the retention windows.
func (r *Router) housekeeping(ctx context.Context) {
	now := time.Now()
	if n, err := r.st.Messages().Prune(ctx, now.Add(-r.cfg.StreamRetention), now.Add(-r.cfg.DedupWindow)); err != nil {
		slog.Default().Warn("prune failed", "error", err)
	} else if n > 0 {
		slog.Default().Debug("pruned confirmed stream rows", "rows", n)
	}
	if n, err := r.st.DLQ().PurgeDeadLetters(ctx, now.Add(-r.cfg.DLQRetention)); err != nil {
		slog.Default().Warn("dead-letter retention failed", "error", err)
	} else if n > 0 {
		r.sink.Record(ctx, observe.Event{Actor: protocol.SchedulerID, Type: "dlq.purged", Details: map[string]any{"entries": n, "retention": r.cfg.DLQRetention.String()}})
	}
}
