package faults

import (
	"context"
	"testing"
	"time"
)

// TestDevKilledUnderMessageLoad: agent A sends 600 messages to agent B from four goroutines
// while `sw4rm dev` (frontend and worker in one process, on PostgreSQL) is killed with
// SIGKILL twice and started again on the same database and port. Every message A was told
// is admitted reaches B, and none reaches B twice.
func TestDevKilledUnderMessageLoad(t *testing.T) {
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	dev := startSW4RM(t, dir, "dev", "dev", sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{
		// The outages here last seconds; the ACK timeout is not what this scenario is about
		// (docs/reliability.md, "Outages longer than the ACK timeout").
		"SW4RM_ACK_TIMEOUT=60s",
		"SW4RM_BUFFER_CAPACITY=100",
	}})

	a := dialAgent(t, dev.addr, agentID("producer"))
	b := dialAgent(t, dev.addr, agentID("consumer"))
	register(t, a, "producer")
	register(t, b, "consumer")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fl := startFlow(ctx, a, b, 600, 4, 0)
	p := fl.p

	kills := 0
	for _, at := range []int{150, 350} {
		if err := waitFor(2*time.Minute, 10*time.Millisecond, func() bool { return p.acceptedCount() >= at }); err != nil {
			t.Fatalf("only %d of %d messages accepted before kill %d", p.acceptedCount(), at, kills+1)
		}
		dev.kill()
		kills++
		dev.restart()
	}
	fl.settle(t, ctx, time.Minute)
	cancel()
	fl.stop()

	f := figures{scenario: "sw4rm-dev-kill"}
	fl.figures(&f)
	fl.audit(t, &f, pg)
	f.add("kills=%d", kills)
	f.report(t)
}
