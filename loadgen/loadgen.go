package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pattern is one pattern's implementation: setup dials and registers its agents and starts
// their background work (which ends with ctx), and op runs one operation to its end or
// until ctx ends.
type pattern interface {
	setup(ctx context.Context, r *runner) error
	op(ctx context.Context, id string)
}

// runner is one Run.
type runner struct {
	cfg     Config
	ledgers map[Pattern]*ledger
	impls   map[Pattern]pattern
	// bg tracks the background goroutines (stream readers, serving agents, pollers); they
	// end with bgCtx.
	bg     sync.WaitGroup
	closes []func()
	mu     sync.Mutex
}

// Run drives the load of cfg against the deployment at cfg.Addr: it registers its agents,
// runs the load for cfg.Duration, drains for at most cfg.Drain, and returns the summary. It
// prints a report to out (nil: nowhere) every cfg.Interval and at the end, and passes each
// to cfg.OnReport. Cancelling ctx ends the load and the drain early; the final accounting
// is still made and returned, with ctx's error. Run leaves no goroutine behind. Setup
// (dialling and registering the agents) is retried until ctx ends, so Run may start while
// the deployment is still coming up.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	if out == nil {
		out = io.Discard
	}
	r := &runner{cfg: cfg, ledgers: map[Pattern]*ledger{}, impls: map[Pattern]pattern{}}
	pats := sortedPatterns(cfg.Patterns)
	for _, p := range pats {
		r.ledgers[p] = newLedger(p)
		r.impls[p] = newPattern(p, r.ledgers[p])
	}
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		bgCancel()
		r.bg.Wait()
		for _, c := range r.closes {
			c()
		}
	}()
	for _, p := range pats {
		if err := r.impls[p].setup(bgCtx, r); err != nil {
			return Summary{}, fmt.Errorf("loadgen: set up %s: %w", p, err)
		}
		if ctx.Err() != nil {
			return Summary{}, ctx.Err()
		}
	}
	fmt.Fprintf(out, "loadgen: %d patterns against %s for %s (drain up to %s), agents %s-*\n", len(pats), cfg.Addr, cfg.Duration, cfg.Drain, cfg.AgentPrefix)

	began := time.Now()
	loadCtx, loadCancel := context.WithTimeout(ctx, cfg.Duration)
	defer loadCancel()
	// Operations live until the drain ends; opsCancel cuts them then.
	opsCtx, opsCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer opsCancel()
	var ops sync.WaitGroup
	var launchers sync.WaitGroup
	for _, p := range pats {
		launchers.Go(func() { r.launch(loadCtx, opsCtx, &ops, p) })
	}

	var sum Summary
	metricsClient := &http.Client{Timeout: 5 * time.Second}
	lastReport := began
	report := func(phase string) {
		now := time.Now()
		rep := r.report(bgCtx, metricsClient, phase, began, now.Sub(lastReport), false)
		lastReport = now
		sum.Reports = append(sum.Reports, rep)
		rep.Write(out)
		if cfg.OnReport != nil {
			cfg.OnReport(rep)
		}
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
load:
	for {
		select {
		case <-loadCtx.Done():
			break load
		case <-tick.C:
			report("load")
		}
	}
	launchers.Wait()

	// The drain: wait for the operations started, at most cfg.Drain (or until ctx ends).
	drained := make(chan struct{})
	go func() { ops.Wait(); close(drained) }()
	drainTimer := time.NewTimer(cfg.Drain)
	defer drainTimer.Stop()
drain:
	for {
		select {
		case <-drained:
			break drain
		case <-drainTimer.C:
			break drain
		case <-ctx.Done():
			break drain
		case <-tick.C:
			report("drain")
		}
	}
	opsCancel()
	<-drained
	// The last word of the system on what did not complete: in flight (stranded) or not
	// (lost).
	for _, p := range pats {
		if pr, ok := r.impls[p].(prober); ok {
			pr.probe(bgCtx)
		}
	}
	sum.Final = r.report(bgCtx, metricsClient, "final", began, time.Since(began), true)
	sum.Final.Write(out)
	if cfg.OnReport != nil {
		cfg.OnReport(sum.Final)
	}
	return sum, ctx.Err()
}

// prober is a pattern that can ask the system, after the drain, which of its unfinished
// operations are still in progress (ledger.setInFlight).
type prober interface {
	probe(ctx context.Context)
}

// launch starts pattern p's operations at its rate, at most its concurrency at once, until
// loadCtx ends; each runs in opsCtx bounded by the operation timeout.
func (r *runner) launch(loadCtx, opsCtx context.Context, ops *sync.WaitGroup, p Pattern) {
	pc := r.cfg.Patterns[p]
	lim := rate.NewLimiter(rate.Limit(pc.Rate), 1)
	sem := make(chan struct{}, pc.Concurrency)
	impl := r.impls[p]
	for n := 0; ; n++ {
		if lim.Wait(loadCtx) != nil {
			return
		}
		select {
		case <-loadCtx.Done():
			return
		case sem <- struct{}{}:
		}
		id := fmt.Sprintf("%s-%s-%d", r.cfg.AgentPrefix, p, n)
		ops.Go(func() {
			defer func() { <-sem }()
			octx, cancel := context.WithTimeout(opsCtx, r.cfg.OpTimeout)
			defer cancel()
			impl.op(octx, id)
		})
	}
}

// report makes a report.
func (r *runner) report(ctx context.Context, hc *http.Client, phase string, began time.Time, interval time.Duration, final bool) Report {
	rep := Report{At: time.Now(), Elapsed: time.Since(began), Phase: phase}
	for _, p := range sortedPatterns(r.cfg.Patterns) {
		rep.Patterns = append(rep.Patterns, r.ledgers[p].report(interval, true, final, r.cfg.OpTimeout))
	}
	for _, u := range r.cfg.MetricsURLs {
		rep.Processes = append(rep.Processes, scrape(ctx, hc, u))
	}
	if r.cfg.DatabaseURL != "" {
		rep.Store = tableSizes(ctx, r.cfg.DatabaseURL, nil)
	}
	if r.cfg.TemporalDatabaseURL != "" {
		rep.History = tableSizes(ctx, r.cfg.TemporalDatabaseURL, historyTables)
	}
	return rep
}

// background runs fn until ctx ends, as part of Run's background work.
func (r *runner) background(fn func()) { r.bg.Go(fn) }

// onClose registers a function Run calls once the background work has stopped.
func (r *runner) onClose(fn func()) {
	r.mu.Lock()
	r.closes = append(r.closes, fn)
	r.mu.Unlock()
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

// attemptTimeout bounds one RPC attempt, so that a call stuck on a silent connection is
// abandoned and made again.
const attemptTimeout = 10 * time.Second

// backoff is the wait before retry n (from 0): from 100 ms doubling to 2 s, plus up to a
// fifth at random, so that retries during an outage neither spin nor synchronise.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 5)
	d = min(d, 2*time.Second)
	return d + rand.N(d/5+1)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// transient reports whether err is an attempt that got no protocol answer, to be made again
// the same way: the server was away, the call timed out or was cut, or the server said it
// was unavailable. Errors carrying a protocol answer (InvalidArgument, FailedPrecondition,
// AlreadyExists, NotFound, PermissionDenied, ...) are not.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.ResourceExhausted, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// retry calls fn with a fresh attempt context until it returns a non-transient result or
// ctx ends, counting errors and retries on l; it returns fn's last error.
func retry(ctx context.Context, l *ledger, fn func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := fn(actx)
		cancel()
		if !transient(ctx, err) {
			return err
		}
		l.errored()
		if attempt == 0 {
			l.retried()
		}
		if !sleep(ctx, backoff(attempt)) {
			return err
		}
	}
}

// pollInterval is the wait before the n-th (from 0) poll of an operation's state: 100 ms,
// growing to a second, so that long operations are not polled in a tight loop.
// pollUntil asks settled, which accounts for the operation and reports true once the system
// answered for good, until it does, the ledger settled o otherwise (the drain's end), or ctx
// ends; the asks back off from 100 ms to a second.
func pollUntil(ctx context.Context, o *op, settled func() bool) {
	for attempt := 0; !settled(); attempt++ {
		select {
		case <-o.done:
			return
		default:
		}
		if !sleep(ctx, pollInterval(attempt)) {
			return
		}
	}
}

func pollInterval(n int) time.Duration {
	return min(100*time.Millisecond+time.Duration(n)*50*time.Millisecond, time.Second)
}
