package faults

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPostgresCrashUnderMessageLoad: agent A sends 500 messages to agent B through
// `sw4rm dev` while the PostgreSQL cluster under it is stopped with
// `pg_ctl stop -m immediate` twice, for about 3 s and 6 s, and started again (crash recovery
// from the WAL). The buffer keeps its default capacity, so rejections with buffer_full and
// their retries cross the crashes too. Every message A was told is admitted reaches B, none
// twice, every admission has its audit row (§19), and sw4rm keeps running. The outages stay
// shorter than the scenario's ACK timeout; TestPostgresOutageLongerThanAckTimeout covers
// longer ones.
func TestPostgresCrashUnderMessageLoad(t *testing.T) {
	crashUnderLoad(t, "postgres-crash", 30*time.Second, 500, 0, []time.Duration{3 * time.Second, 6 * time.Second})
}

// TestPostgresOutageLongerThanAckTimeout is issue 13's defect 5: PostgreSQL is down for about
// 10 s under load with a 4 s ACK timeout, while the consumer spends 20 ms on each message, so
// that its buffer holds delivered, unconfirmed messages when the crash comes. The time the plane itself was down must not count
// against consumers (§11, "10 s to RECEIVED"): no message is lost or delivered twice, and no
// message the consumer confirmed is reported TIMED_OUT to its producer.
func TestPostgresOutageLongerThanAckTimeout(t *testing.T) {
	crashUnderLoad(t, "postgres-outage-over-ack-timeout", 4*time.Second, 300, 20*time.Millisecond, []time.Duration{10 * time.Second})
}

// crashUnderLoad runs A→B traffic of n messages (the consumer spending work on each) through
// `sw4rm dev` with the given ACK timeout, and stops PostgreSQL immediately once per outage, after each further share of the
// messages was accepted, for that long.
func crashUnderLoad(t *testing.T, scenario string, ackTimeout time.Duration, n int, work time.Duration, outages []time.Duration) {
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
	dev := startSW4RM(t, dir, "dev", "dev", sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{
		"SW4RM_ACK_TIMEOUT=" + ackTimeout.String(),
		"SW4RM_HTTP_ADDR=" + metricsAddr, // the group commit's counters
	}})

	a := dialAgent(t, dev.addr, agentID("producer"))
	b := dialAgent(t, dev.addr, agentID("consumer"))
	register(t, a, "producer")
	register(t, b, "consumer")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fl := startFlow(ctx, a, b, n, 4, work)
	p := fl.p

	var took []time.Duration
	for i, outage := range outages {
		at := n * (i + 1) / (len(outages) + 2)
		if err := waitFor(2*time.Minute, 10*time.Millisecond, func() bool { return p.acceptedCount() >= at }); err != nil {
			t.Fatalf("only %d of %d messages accepted before crash %d", p.acceptedCount(), at, i+1)
		}
		failed := p.errors.Load()
		pg.stopImmediate()
		began := time.Now()
		// The outage counts once the producer has run into it.
		if err := waitFor(30*time.Second, 10*time.Millisecond, func() bool { return p.errors.Load() > failed }); err != nil {
			t.Fatalf("no send failed while PostgreSQL was down")
		}
		// The outage's length is the fault being injected, not a wait for anything: seconds,
		// as a crashed server takes to be restarted, so that retries, stream reconnections
		// and the sweep all meet it.
		time.Sleep(time.Until(began.Add(outage)))
		pg.start()
		took = append(took, time.Since(began).Round(100*time.Millisecond))
	}
	fl.settle(t, ctx, time.Minute)
	cancel()
	fl.stop()

	f := figures{scenario: scenario}
	fl.figures(&f)
	fl.audit(t, &f, pg)
	f.add("outages=%v ack_timeout=%s", took, ackTimeout)
	// The crashes must have met group commits: writes that shared a transaction.
	groups, writes := metricValue(t, metricsAddr, "sw4rm_store_group_commits_total"), metricValue(t, metricsAddr, "sw4rm_store_group_commit_writes_total")
	f.add("group_commits=%.0f writes_per_commit=%.2f", groups, writes/max(groups, 1))
	if writes <= groups {
		f.problem("no two writes shared a commit (%.0f writes in %.0f commits): the crashes did not meet group commits", writes, groups)
	}
	if dev.proc.exited() {
		f.problem("sw4rm dev exited during the PostgreSQL outages")
	}
	f.report(t)
}

// metricValue scrapes the frontend's /metrics at addr for one unlabelled series.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s at %s", name, addr)
	return 0
}
