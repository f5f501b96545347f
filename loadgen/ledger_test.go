package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestLedgerAccounting: a fake system that loses one operation, doubles another, leaves one
// in flight and refuses one is reported as such, and completed work is counted once.
func TestLedgerAccounting(t *testing.T) {
	l := newLedger(Messages)
	for _, id := range []string{"ok", "twice", "lost", "stuck", "refused", "failed", "silent"} {
		l.start(id)
	}
	for _, id := range []string{"ok", "twice", "lost", "stuck", "failed"} {
		l.ack(id)
	}
	assert.True(t, l.complete("ok"))
	assert.True(t, l.complete("twice"))
	assert.False(t, l.complete("twice"), "a second completion is not a first")
	l.double("twice")
	l.setInFlight("stuck", true)
	l.refuse("refused")
	l.fail("failed")
	l.errored()
	l.retried()

	mid := l.report(time.Second, true, false, time.Hour)
	assert.Equal(t, int64(7), mid.Started)
	assert.Equal(t, int64(2), mid.Completed)
	assert.Equal(t, int64(0), mid.Lost, "not lost before the end while within the operation timeout")
	assert.Equal(t, int64(3), mid.InFlight, "lost, stuck and silent are in flight")
	assert.Equal(t, int64(1), mid.Doubled)
	assert.Equal(t, 2.0, mid.OpsPerSec)

	fin := l.report(time.Second, true, true, time.Hour)
	assert.Equal(t, int64(2), fin.Completed)
	assert.Equal(t, int64(1), fin.Lost, "acknowledged, never completed, not in flight")
	assert.Equal(t, int64(1), fin.Stranded, "acknowledged and still in flight")
	assert.Equal(t, int64(1), fin.Doubled)
	assert.Equal(t, int64(1), fin.Refused)
	assert.Equal(t, int64(1), fin.Failed)
	assert.Equal(t, int64(1), fin.Unanswered)
	assert.Equal(t, int64(1), fin.Errors)
	assert.Equal(t, int64(1), fin.Retries)
	assert.Zero(t, fin.InFlight)
	assert.Positive(t, fin.P50)
}

// TestLedgerCompletionWinsOverGiveUp: an operation its caller gave up on (failed) that then
// completes counts as completed, not failed.
func TestLedgerCompletionWinsOverGiveUp(t *testing.T) {
	l := newLedger(Tasks)
	l.start("a")
	l.ack("a")
	l.fail("a")
	l.complete("a")
	r := l.report(time.Second, false, true, time.Hour)
	assert.Equal(t, int64(1), r.Completed)
	assert.Zero(t, r.Failed)
}

// TestMessagesDoubled: the messages consumer reports a message delivered under two
// message_ids, or again after its confirmation was recorded, as doubled.
func TestMessagesDoubled(t *testing.T) {
	m := newPattern(Messages, newLedger(Messages)).(*messages)
	for _, id := range []string{"a", "b", "c"} {
		m.l.start(id)
		m.l.ack(id)
	}
	deliver := func(op, msgID string) { m.record(op, msgID) }
	deliver("a", "m1")
	deliver("b", "m2")
	deliver("b", "m3") // the retry admitted beside the original
	deliver("c", "m4")
	m.mu.Lock()
	m.confirmed["m4"] = true
	m.mu.Unlock()
	deliver("c", "m4") // redelivered after a recorded confirmation
	r := m.l.report(time.Second, false, true, time.Hour)
	assert.Equal(t, int64(3), r.Completed)
	assert.Equal(t, int64(2), r.Doubled)
}

// TestFlat: a heap or a per-operation history that grew beyond tolerance is reported.
func TestFlat(t *testing.T) {
	mk := func(done int64, heap, live float64, hist int64) Report {
		return Report{Patterns: []PatternReport{{Pattern: Messages, Completed: done}},
			Processes: []ProcessReport{{Name: "worker-1", URL: "u", HeapInuseBytes: heap, LiveHeapBytes: live, Goroutines: 100}},
			History:   &DatabaseReport{TotalBytes: hist}}
	}
	ok, why := Flat(Summary{Reports: []Report{mk(0, 1, 0, 1), mk(100, 100, 0, 1000)}, Final: mk(1000, 110, 0, 10000)}, 0.2)
	assert.True(t, ok, "%v", why)
	// Heap in use swings up to twice the live heap between collections: without a live
	// heap, only growth beyond (1+2×0.2+1) counts.
	ok, why = Flat(Summary{Reports: []Report{mk(100, 100, 0, 1000)}, Final: mk(1000, 200, 0, 10000)}, 0.2)
	assert.True(t, ok, "%v", why)
	ok, why = Flat(Summary{Reports: []Report{mk(100, 100, 0, 1000)}, Final: mk(1000, 250, 0, 10000)}, 0.2)
	assert.False(t, ok)
	assert.Len(t, why, 1)
	assert.Contains(t, why[0], "worker-1: heap in use")
	// With a live heap both times, it is the one judged, at the tolerance itself.
	ok, why = Flat(Summary{Reports: []Report{mk(100, 100, 50, 1000)}, Final: mk(1000, 250, 55, 10000)}, 0.2)
	assert.True(t, ok, "%v", why)
	ok, why = Flat(Summary{Reports: []Report{mk(100, 100, 50, 1000)}, Final: mk(1000, 100, 70, 10000)}, 0.2)
	assert.False(t, ok)
	assert.Contains(t, why[0], "worker-1: live heap grew")
	ok, why = Flat(Summary{Reports: []Report{mk(100, 100, 0, 1000)}, Final: mk(1000, 100, 0, 50000)}, 0.2)
	assert.False(t, ok)
	assert.Contains(t, why[0], "history")
}

func TestParsePatterns(t *testing.T) {
	p, err := ParsePatterns("messages=50/32, tasks,dag=0.2")
	assert.NoError(t, err)
	assert.Equal(t, map[Pattern]PatternConfig{Messages: {Rate: 50, Concurrency: 32}, Tasks: {}, DAG: {Rate: 0.2}}, p)
	p, err = ParsePatterns("all")
	assert.NoError(t, err)
	assert.Len(t, p, len(AllPatterns))
	for _, bad := range []string{"", "nope", "messages=x", "messages=1/-2"} {
		_, err := ParsePatterns(bad)
		assert.Error(t, err, bad)
	}
}

// TestScrape: a named target keeps its name; a sw4rm process's live heap is read; the
// Temporal server's own runtime gauges stand in for client_golang's.
func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sw4rm":
			fmt.Fprint(w, "# TYPE go_goroutines gauge\ngo_goroutines 42\n# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 2e+07\n"+
				"# TYPE go_gc_heap_live_bytes gauge\ngo_gc_heap_live_bytes 8e+06\n")
		case "/temporal":
			fmt.Fprint(w, "# TYPE num_goroutines gauge\nnum_goroutines 300\n# TYPE memory_heapinuse gauge\nmemory_heapinuse 5e+07\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	p := scrape(ctx, srv.Client(), "server-1="+srv.URL+"/sw4rm")
	assert.Equal(t, ProcessReport{Name: "server-1", URL: srv.URL + "/sw4rm", Goroutines: 42, HeapInuseBytes: 2e7, LiveHeapBytes: 8e6}, p)
	p = scrape(ctx, srv.Client(), srv.URL+"/temporal")
	assert.Equal(t, ProcessReport{Name: srv.URL + "/temporal", URL: srv.URL + "/temporal", Goroutines: 300, HeapInuseBytes: 5e7}, p)
	p = scrape(ctx, srv.Client(), "x="+srv.URL+"/nope")
	assert.Equal(t, "404 Not Found", p.Error)
}

// TestFlatAfter: growth during warm-up is not judged; growth after it is.
func TestFlatAfter(t *testing.T) {
	at := func(min int, live float64) Report {
		return Report{Elapsed: time.Duration(min) * time.Minute, Patterns: []PatternReport{{Pattern: Messages, Completed: int64(min * 100)}},
			Processes: []ProcessReport{{Name: "temporal", URL: "u", HeapInuseBytes: live * 2, LiveHeapBytes: live, Goroutines: 100}}}
	}
	s := Summary{Reports: []Report{at(1, 10), at(5, 40), at(10, 42)}, Final: at(12, 45)}
	ok, _ := Flat(s, 0.5)
	assert.False(t, ok, "from the first minute, the caches filling looks like growth")
	assert.Equal(t, 5*time.Minute, s.BaselineAfter(5*time.Minute).Elapsed)
	ok, why := FlatAfter(s, 0.5, 5*time.Minute)
	assert.True(t, ok, "%v", why)
	s.Final = at(12, 80)
	ok, _ = FlatAfter(s, 0.5, 5*time.Minute)
	assert.False(t, ok)
}
