package audit

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Access decisions (§6.5: "all access decisions MUST be logged and auditable"). Every
// decision a participant makes about a principal — a method call admitted or refused
// (auth.*), a tool call, a resource scope, a message type decided by the ACL (access.*) —
// goes through one AccessLog, which writes it to the sink as the level says and counts it,
// so that the decisions it does not write are still accounted for (AccessCounts: the
// sw4rm_access_decisions_total metric). A refusal is always written.

// AccessLevel is which access decisions get an audit row of their own (SW4RM_AUDIT_ACCESS).
// The zero value writes refusals only.
type AccessLevel struct {
	// every: 0 writes no allowed decision, 1 every one, n one in n of each kind.
	every int
}

// The access levels.
var (
	// AccessRefused writes every refusal; an allowed decision is only counted.
	AccessRefused = AccessLevel{}
	// AccessAll writes every decision, allowed or refused.
	AccessAll = AccessLevel{every: 1}
)

// AccessSample writes every refusal and one allowed decision in n of each kind (the first,
// the n+1st, …); n < 2 is AccessAll.
func AccessSample(n int) AccessLevel {
	if n < 2 {
		return AccessAll
	}
	return AccessLevel{every: n}
}

// Every is how many allowed decisions of a kind one row stands for: 0 for none written.
func (l AccessLevel) Every() int { return l.every }

// String returns the level's configuration name: refused, all or sample:<n>.
func (l AccessLevel) String() string {
	switch l.every {
	case 0:
		return "refused"
	case 1:
		return "all"
	}
	return "sample:" + strconv.Itoa(l.every)
}

// ParseAccessLevel reads SW4RM_AUDIT_ACCESS: "refused" (or ""), "all", or "sample:<n>" with
// n ≥ 1.
func ParseAccessLevel(s string) (AccessLevel, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "", "refused":
		return AccessRefused, nil
	case "all":
		return AccessAll, nil
	}
	if n, ok := strings.CutPrefix(v, "sample:"); ok {
		if k, err := strconv.Atoi(n); err == nil && k >= 1 {
			return AccessSample(k), nil
		}
	}
	return AccessRefused, fmt.Errorf("SW4RM_AUDIT_ACCESS=%q: want refused, all or sample:<n> (n ≥ 1)", s)
}

// AccessCount is how many decisions of one kind and outcome were made, and how many of them
// were written to the audit log.
type AccessCount struct {
	// Kind is the decision's audit type prefix, e.g. "auth" or "access".
	Kind string
	// Allowed is the outcome.
	Allowed bool
	// Decided counts the decisions; Written those with an audit row.
	Decided, Written uint64
}

// AccessLog writes access decisions to a sink at a level and counts them. Safe for
// concurrent use; a nil *AccessLog writes and counts nothing.
type AccessLog struct {
	sink  *Sink
	level AccessLevel

	mu     sync.Mutex
	counts map[accessKey]*accessCounter
}

type accessKey struct {
	kind    string
	allowed bool
}

type accessCounter struct{ decided, written atomic.Uint64 }

// NewAccessLog returns the access log over sink at level.
func NewAccessLog(sink *Sink, level AccessLevel) *AccessLog {
	return &AccessLog{sink: sink, level: level, counts: map[accessKey]*accessCounter{}}
}

// Level returns the log's level.
func (l *AccessLog) Level() AccessLevel {
	if l == nil {
		return AccessRefused
	}
	return l.level
}

func (l *AccessLog) counter(kind string, allowed bool) *accessCounter {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := accessKey{kind, allowed}
	c, ok := l.counts[k]
	if !ok {
		c = &accessCounter{}
		l.counts[k] = c
	}
	return c
}

// Allowed counts an allowed decision of kind and writes e when the level says so: always
// with AccessAll, one in n with AccessSample(n), never with AccessRefused. A written
// sampled row says how many decisions it stands for (details "sampled_one_in").
func (l *AccessLog) Allowed(ctx context.Context, kind string, e Event) {
	if l == nil {
		return
	}
	c := l.counter(kind, true)
	n := c.decided.Add(1)
	if l.level.every == 0 || (n-1)%uint64(l.level.every) != 0 {
		return
	}
	c.written.Add(1)
	if l.level.every > 1 {
		e.Details = withDetail(e.Details, "sampled_one_in", l.level.every)
	}
	if e.Level == 0 {
		e.Level = slog.LevelInfo
	}
	l.sink.Record(ctx, e)
}

// Refused counts a refusal of kind and writes e, whatever the level.
func (l *AccessLog) Refused(ctx context.Context, kind string, e Event) {
	if l == nil {
		return
	}
	c := l.counter(kind, false)
	c.decided.Add(1)
	c.written.Add(1)
	if e.Level == 0 {
		e.Level = slog.LevelWarn
	}
	l.sink.Record(ctx, e)
}

// Counts returns the decisions counted so far, one entry per kind and outcome seen.
func (l *AccessLog) Counts() []AccessCount {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]AccessCount, 0, len(l.counts))
	for k, c := range l.counts {
		out = append(out, AccessCount{Kind: k.kind, Allowed: k.allowed, Decided: c.decided.Load(), Written: c.written.Load()})
	}
	return out
}

// withDetail returns a copy of d with k set to v (the caller's map is never changed).
func withDetail(d map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(d)+1)
	for key, val := range d {
		out[key] = val
	}
	out[k] = v
	return out
}
