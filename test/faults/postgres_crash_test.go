package faults

import (
	"context"
	"testing"
	"time"
)

// TestPostgresCrashUnderMessageLoad: agent A sends 500 messages to agent B through
// `sw4rm dev` while the PostgreSQL cluster under it is stopped with `pg_ctl stop -m immediate`
// twice, for about 3 s and 6 s, and started again (crash recovery from the WAL). The buffer keeps its default
// capacity, so rejections with buffer_full and their retries cross the crashes too. Every
// message A was told is admitted reaches B, none twice, and sw4rm keeps running. The outages
// stay shorter than the scenario's ACK timeout; longer ones are defect 5 of issue 13
// (docs/reliability.md).
func TestPostgresCrashUnderMessageLoad(t *testing.T) {
	const ackTimeout = 30 * time.Second
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	dev := startSW4RM(t, dir, "dev", "dev", sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{
		"SW4RM_ACK_TIMEOUT=" + ackTimeout.String(),
	}})

	a := dialAgent(t, dev.addr, agentID("producer"))
	b := dialAgent(t, dev.addr, agentID("consumer"))
	register(t, a, "producer")
	register(t, b, "consumer")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newConsumer(b)
	consumerDone := c.start(ctx)
	p := newProducer(a, b.ID(), 500)
	producerDone := p.start(ctx, 4)

	var outages []time.Duration
	for i, at := range []int{120, 300} {
		if err := waitFor(2*time.Minute, 10*time.Millisecond, func() bool { return p.acceptedCount() >= at }); err != nil {
			t.Fatalf("only %d of %d messages accepted before crash %d", p.acceptedCount(), at, len(outages)+1)
		}
		failed := p.errors.Load()
		pg.stopImmediate()
		began := time.Now()
		// The outage counts once the producer has run into it.
		if err := waitFor(30*time.Second, 10*time.Millisecond, func() bool { return p.errors.Load() > failed }); err != nil {
			t.Fatalf("no send failed while PostgreSQL was down")
		}
		// The outage's length is the fault being injected, not a wait for anything: a few
		// seconds, as a crashed server takes to be restarted, so that retries, stream
		// reconnections and the sweep all meet it.
		time.Sleep(time.Until(began.Add(time.Duration(3*(i+1)) * time.Second)))
		pg.start()
		outages = append(outages, time.Since(began).Round(100*time.Millisecond))
	}
	producerDone()
	settle(t, ctx, p, c, time.Minute)
	cancel()
	consumerDone()

	f := figures{scenario: "postgres-crash"}
	messageFigures(&f, p, c)
	f.add("outages=%v ack_timeout=%s", outages, ackTimeout)
	for _, o := range outages {
		if o >= ackTimeout {
			f.problem("an outage of %s is not shorter than the ACK timeout, which this scenario assumes", o)
		}
	}
	if dev.proc.exited() {
		f.problem("sw4rm dev exited during the PostgreSQL outages")
	}
	f.report(t)
}
