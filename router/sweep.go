package router

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// sweepBatch bounds the work of one sweep step.
const sweepBatch = 100

// housekeepingEvery is how often Run prunes stream rows and idempotency entries, and how often
// runRetention prunes the other kinds.
const housekeepingEvery = time.Minute

// Run enforces the router's timers until ctx ends: ACK timeouts (§11), TTL expiry, response
// deadlines (004 §1) and the retention of stream rows and idempotency entries.
// Every frontend runs it; the store hands each expired item to exactly one of them, so the
// timeouts hold with any number of frontends sharing the store. It also runs the writer of
// control-traffic confirmations (see controlConfirms), which defers them only while Run runs,
// keeps the router's copy of the handoff fences fresh (fence.go) and applies the retention of
// the other finished records (retention.go).
func (r *Router) Run(ctx context.Context) {
	written := make(chan struct{})
	go func() {
		defer close(written)
		r.confirms.run(ctx, r.st.Messages())
	}()
	defer func() { <-written }() // Run returns once the last confirmations are written
	fenced := make(chan struct{})
	go func() {
		defer close(fenced)
		r.watchFences(ctx)
	}()
	defer func() { <-fenced }()
	retained := make(chan struct{})
	go func() {
		defer close(retained)
		r.runRetention(ctx)
	}()
	defer func() { <-retained }()
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	lastHousekeeping := time.Time{}
	// up is since when this sweeper has reached the store without a failure: from the start
	// of the process, then from the first successful sweep after a failed one. The time before
	// — a frontend restarting, a database outage — was time the plane was down, which must not
	// count against consumers (§11: the ACK timeout is 10 s to RECEIVED; a consumer cannot
	// confirm while the plane is down). So ACK timeouts apply only once the sweeper has been up
	// for a full ACK timeout: a message admitted before an outage then gets at least the ACK
	// timeout after it, consumers reconnect and confirm what they received, and what they
	// never received is delivered instead of withdrawn.
	up := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.sweep(ctx, !up.IsZero() && time.Since(up) >= r.cfg.AckTimeout)
		switch {
		case err != nil && ctx.Err() == nil:
			if !up.IsZero() {
				slog.Default().Warn("router sweep failed; ACK timeouts wait until the store has been reachable for an ACK timeout again",
					"error", err, "ack_timeout", r.cfg.AckTimeout.String())
			}
			up = time.Time{}
		case err == nil && up.IsZero():
			up = time.Now()
			slog.Default().Info("router sweep recovered; ACK timeouts resume after an ACK timeout", "ack_timeout", r.cfg.AckTimeout.String())
		}
		if time.Since(lastHousekeeping) > housekeepingEvery {
			lastHousekeeping = time.Now()
			r.housekeeping(ctx)
		}
	}
}

// noAckTimeout is an ACK timeout no message reaches: Expire given it applies TTLs only.
const noAckTimeout = 100 * 365 * 24 * time.Hour

// SweepOnce runs one sweep step, ACK timeouts included; Run runs the steps, holding ACK
// timeouts back while the plane has not been up for an ACK timeout.
func (r *Router) SweepOnce(ctx context.Context) error { return r.sweep(ctx, true) }

// sweep runs one sweep step. Without ackTimeouts it still applies TTLs — deadlines the
// producer set, which an outage does not extend — and response deadlines.
func (r *Router) sweep(ctx context.Context, ackTimeouts bool) error {
	ackTimeout := r.cfg.AckTimeout
	if !ackTimeouts {
		ackTimeout = noAckTimeout
	}
	for {
		// A database that is unreachable rather than refusing makes the call hang; it must
		// fail, so that Run counts the outage, rather than complete once the database is back
		// with ACK timeouts decided before the outage began.
		ectx, cancel := context.WithTimeout(ctx, max(r.cfg.AckTimeout/2, time.Second))
		expired, err := r.st.Messages().Expire(ectx, ackTimeout, sweepBatch)
		cancel()
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
	r.sink.Record(ctx, audit.Event{CorrelationID: rec.CorrelationID, Actor: protocol.SchedulerID, Type: "message.state",
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

// housekeeping applies the retention of stream rows and idempotency entries; the other
// kinds are runRetention's.
func (r *Router) housekeeping(ctx context.Context) {
	now := time.Now()
	if n, err := r.st.Messages().Prune(ctx, now.Add(-r.cfg.StreamRetention), now.Add(-r.cfg.DedupWindow)); err != nil {
		slog.Default().Warn("prune failed", "error", err)
	} else if n > 0 {
		r.pruned("stream_rows", n)
		slog.Default().Debug("pruned confirmed stream rows", "rows", n)
	}
}
