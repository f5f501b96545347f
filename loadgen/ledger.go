package loadgen

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// opState is where an operation stands in the accounting.
type opState int

const (
	// opStarted: attempted, no attempt acknowledged yet.
	opStarted opState = iota
	// opAcked: the system acknowledged it (admitted, accepted, started).
	opAcked
	// opCompleted: its completion was observed.
	opCompleted
	// opFailed: the system ended it with a protocol failure.
	opFailed
	// opRefused: the system refused it with a protocol answer at submission.
	opRefused
)

// op is one operation of a pattern.
type op struct {
	state   opState
	start   time.Time
	doubled bool
	// inFlight is the system's last word on an acknowledged operation that has not
	// completed: true when it reports the operation still in progress.
	inFlight bool
	done     chan struct{}
}

// maxSamples bounds the latencies kept per interval and for the whole run.
const maxSamples = 20000

// samples is a bounded uniform sample of latencies (reservoir sampling).
type samples struct {
	vals []time.Duration
	seen int
}

func (s *samples) add(d time.Duration) {
	s.seen++
	if len(s.vals) < maxSamples {
		s.vals = append(s.vals, d)
		return
	}
	if i := rand.IntN(s.seen); i < maxSamples {
		s.vals[i] = d
	}
}

// percentiles returns the 50th, 95th and 99th percentiles (nearest rank), zero when empty.
func (s *samples) percentiles() (p50, p95, p99 time.Duration) {
	if len(s.vals) == 0 {
		return 0, 0, 0
	}
	v := slices.Clone(s.vals)
	slices.Sort(v)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(v))+0.5) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	return at(0.50), at(0.95), at(0.99)
}

// ledger is one pattern's accounting: every operation by id, and the counters.
type ledger struct {
	pattern Pattern
	mu      sync.Mutex
	ops     map[string]*op
	// errors counts attempts that failed without a protocol answer; retries counts
	// operations that needed more than one attempt.
	errors, retries int64
	notes           map[string]int64
	interval, all   samples
	// intervalDone counts completions since the last report.
	intervalDone int64
}

func newLedger(p Pattern) *ledger {
	return &ledger{pattern: p, ops: map[string]*op{}, notes: map[string]int64{}}
}

// start records a new operation; a repeated id returns the existing one.
func (l *ledger) start(id string) *op {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.ops[id]; ok {
		return o
	}
	o := &op{start: time.Now(), done: make(chan struct{})}
	l.ops[id] = o
	return o
}

// get returns the operation id, nil when it was never started.
func (l *ledger) get(id string) *op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops[id]
}

// ack records that the system acknowledged the operation.
func (l *ledger) ack(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.ops[id]; o != nil && o.state == opStarted {
		o.state = opAcked
	}
}

// complete records a completion of the operation and reports whether it was the first.
// A completion of an operation that completed already is not one: callers that see the
// side effect twice call double.
func (l *ledger) complete(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.ops[id]
	if o == nil || o.state == opCompleted {
		return false
	}
	// A completion wins over a failure or refusal recorded by a caller that gave up early:
	// the work happened.
	o.state = opCompleted
	o.inFlight = false
	lat := time.Since(o.start)
	l.interval.add(lat)
	l.all.add(lat)
	l.intervalDone++
	close(o.done)
	return true
}

// double marks the operation's side effect as seen more than once.
func (l *ledger) double(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.ops[id]; o != nil {
		o.doubled = true
	}
}

// fail records that the system ended the operation with a protocol failure.
func (l *ledger) fail(id string) { l.end(id, opFailed) }

// refuse records a protocol refusal of the operation's submission.
func (l *ledger) refuse(id string) { l.end(id, opRefused) }

func (l *ledger) end(id string, s opState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.ops[id]; o != nil && o.state != opCompleted && o.state != opFailed && o.state != opRefused {
		o.state = s
		o.inFlight = false
	}
}

// setInFlight records the system's last word on whether an acknowledged operation is still
// in progress.
func (l *ledger) setInFlight(id string, v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.ops[id]; o != nil && o.state == opAcked {
		o.inFlight = v
	}
}

// errored counts an attempt that failed without a protocol answer.
func (l *ledger) errored() {
	l.mu.Lock()
	l.errors++
	l.mu.Unlock()
}

// retried counts an operation that needed another attempt.
func (l *ledger) retried() {
	l.mu.Lock()
	l.retries++
	l.mu.Unlock()
}

// note adds n to a pattern-specific counter.
func (l *ledger) note(key string, n int64) {
	l.mu.Lock()
	l.notes[key] += n
	l.mu.Unlock()
}

// report returns the pattern's figures; interval is the time since the last report, and
// reset starts a new interval. final counts every acknowledged operation that did not
// complete as lost or stranded; before the end only those in flight for longer than
// opTimeout are, so that the figures "so far" do not count work merely in progress.
func (l *ledger) report(interval time.Duration, reset, final bool, opTimeout time.Duration) PatternReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := PatternReport{Pattern: l.pattern, Errors: l.errors, Retries: l.retries, IntervalCompleted: l.intervalDone}
	if len(l.notes) > 0 {
		r.Notes = map[string]int64{}
		for k, v := range l.notes {
			r.Notes[k] = v
		}
	}
	now := time.Now()
	for _, o := range l.ops {
		r.Started++
		if o.doubled {
			r.Doubled++
		}
		switch o.state {
		case opStarted:
			if final {
				r.Unanswered++
			} else {
				r.InFlight++
			}
		case opAcked:
			r.Acked++
			switch {
			case final || now.Sub(o.start) > opTimeout:
				if o.inFlight {
					r.Stranded++
				} else {
					r.Lost++
				}
			default:
				r.InFlight++
			}
		case opCompleted:
			r.Acked++
			r.Completed++
		case opFailed:
			r.Acked++
			r.Failed++
		case opRefused:
			r.Refused++
		}
	}
	s := &l.interval
	if final {
		s = &l.all
	}
	r.P50, r.P95, r.P99 = s.percentiles()
	if interval > 0 {
		r.OpsPerSec = float64(l.intervalDone) / interval.Seconds()
	}
	if final {
		// The final report's rate is over the whole run.
		r.IntervalCompleted = r.Completed
		if interval > 0 {
			r.OpsPerSec = float64(r.Completed) / interval.Seconds()
		}
	}
	if reset {
		l.interval = samples{}
		l.intervalDone = 0
	}
	return r
}

// unfinished returns the operations acknowledged and not ended.
func (l *ledger) unfinished() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, o := range l.ops {
		if o.state == opAcked {
			ids = append(ids, id)
		}
	}
	return ids
}
