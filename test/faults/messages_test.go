package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// payload is the body of a numbered message, or of the consumer's end-of-run sentinel.
type payload struct {
	N        int    `json:"n"`
	Sentinel string `json:"sentinel,omitempty"`
}

// producer sends n numbered messages to one recipient from several goroutines. Each message
// is one logical operation: it carries an idempotency token, and a send that fails without a
// protocol answer (the server died, the store was down) is retried as §11.3 prescribes — new
// message_id, same token, retry_count+1 — until the system answers. A message counts as
// accepted when an attempt was admitted, or when a retry is told an earlier attempt was
// (already_in_progress, duplicate_detected).
type producer struct {
	agent  *sdk.Agent
	to     string
	n      int
	next   atomic.Int64
	errors atomic.Int64 // sends that failed without a protocol answer

	mu       sync.Mutex
	accepted map[int]bool
	rejected map[string]int // protocol rejections other than buffer_full, by code
	gaveUp   []int          // messages no attempt got an answer for within the deadline
	retried  int            // messages that needed more than one attempt
	full     int            // buffer_full answers (retried)
}

func newProducer(a *sdk.Agent, to string, n int) *producer {
	return &producer{agent: a, to: to, n: n, accepted: map[int]bool{}, rejected: map[string]int{}}
}

// start runs the senders; the returned function waits for them.
func (p *producer) start(ctx context.Context, senders int) (wait func()) {
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for {
				i := int(p.next.Add(1))
				if i > p.n || ctx.Err() != nil {
					return
				}
				p.send(ctx, i)
			}
		})
	}
	return wg.Wait
}

// send delivers message i, retrying for at most a minute.
func (p *producer) send(ctx context.Context, i int) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	body, _ := json.Marshal(payload{N: i})
	token := p.agent.ID() + "/" + strconv.Itoa(i)
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.agent.Send(actx, sdk.Message{To: p.to, Payload: body, IdempotencyToken: token, RetryCount: uint32(attempt)})
		acancel()
		code, rejected := rejectedCode(err)
		p.mu.Lock()
		if attempt == 1 {
			p.retried++
		}
		switch {
		case err == nil, code == commonpb.ErrorCode_ALREADY_IN_PROGRESS, code == commonpb.ErrorCode_DUPLICATE_DETECTED:
			p.accepted[i] = true
			p.mu.Unlock()
			return
		case code == commonpb.ErrorCode_BUFFER_FULL:
			p.full++ // the recipient is behind: wait for it, the store keeps no cache entry
		case rejected:
			p.rejected[code.String()]++
			p.mu.Unlock()
			return
		default:
			p.errors.Add(1)
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.gaveUp = append(p.gaveUp, i)
			p.mu.Unlock()
			return
		case <-time.After(backoffFor(code)):
		}
	}
}

func backoffFor(code commonpb.ErrorCode) time.Duration {
	if code == commonpb.ErrorCode_BUFFER_FULL {
		return 20 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// acceptedCount is how many messages were accepted so far.
func (p *producer) acceptedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

// consumer is the recipient: it reads its stream, confirms every delivery and records what it
// saw. A stream that fails is opened again (the server delivers whatever was not confirmed
// first), and so is one whose confirmation failed, so that the delivery comes back at once
// rather than after its lease.
type consumer struct {
	agent *sdk.Agent
	reset chan struct{}
	work  time.Duration // spent on each data message before it is confirmed

	mu           sync.Mutex
	delivered    map[int]map[string]bool // message number → message_ids delivered
	confirmed    map[string]bool         // message_ids whose confirmation was recorded
	afterConfirm map[int]bool            // numbers delivered again after a recorded confirmation
	deliveries   int
	streams      int
	sentinels    map[string]bool
	nacks        map[string]int  // ACKs other than RECEIVED/READ/FULFILLED received, by stage
	timedOut     map[string]bool // message_ids this agent was told TIMED_OUT
}

func newConsumer(a *sdk.Agent) *consumer {
	return &consumer{agent: a, reset: make(chan struct{}, 1), delivered: map[int]map[string]bool{},
		confirmed: map[string]bool{}, afterConfirm: map[int]bool{}, sentinels: map[string]bool{},
		nacks: map[string]int{}, timedOut: map[string]bool{}}
}

// start runs the consumer until ctx ends; the returned function waits for it.
func (c *consumer) start(ctx context.Context) (wait func()) {
	return streamReader{agent: c.agent, reset: c.reset, mu: &c.mu, streams: &c.streams, handle: c.handle}.start(ctx)
}

// handle records and confirms one delivery; false means the confirmation failed.
func (c *consumer) handle(ctx context.Context, d *sdk.Delivery) bool {
	var p payload
	isData := d.Envelope.GetMessageType() == commonpb.MessageType_DATA && d.DecodeJSON(&p) == nil
	id := d.Envelope.GetMessageId()
	if ack, ok := d.AckPayload(); ok && ack.Stage >= commonpb.AckStage_REJECTED {
		c.mu.Lock()
		c.nacks[ack.Stage.String()]++
		if ack.Stage == commonpb.AckStage_TIMED_OUT {
			c.timedOut[ack.AckForMessageID] = true
		}
		c.mu.Unlock()
	}
	if isData {
		c.mu.Lock()
		c.deliveries++
		if p.Sentinel != "" {
			c.sentinels[p.Sentinel] = true
		} else {
			if c.delivered[p.N] == nil {
				c.delivered[p.N] = map[string]bool{}
			}
			c.delivered[p.N][id] = true
			if c.confirmed[id] {
				c.afterConfirm[p.N] = true
			}
		}
		c.mu.Unlock()
	}
	if isData && c.work > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.work):
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := d.Confirm(cctx)
	if err != nil {
		return false
	}
	if ok && isData {
		c.mu.Lock()
		c.confirmed[id] = true
		c.mu.Unlock()
	}
	return true
}

// has reports whether message i was delivered.
func (c *consumer) has(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.delivered[i]) > 0
}

// flow is A→B traffic: the producer, the consumer B, and A's own inbox, which A reads as
// any agent does (the ACKs and NACKs of what it sent arrive there).
type flow struct {
	p         *producer
	c         *consumer
	inbox     *consumer
	senders   func()
	consumers []func()
}

// startFlow starts A sending n messages to B from senders goroutines, B consuming (spending
// work on each message before confirming it) and A reading its inbox, until ctx ends.
func startFlow(ctx context.Context, a, b *sdk.Agent, n, senders int, work time.Duration) *flow {
	fl := &flow{p: newProducer(a, b.ID(), n), c: newConsumer(b), inbox: newConsumer(a)}
	fl.c.work = work
	fl.consumers = []func(){fl.c.start(ctx), fl.inbox.start(ctx)}
	fl.senders = fl.p.start(ctx, senders)
	return fl
}

// wait waits for the producer's senders.
func (fl *flow) wait() { fl.senders() }

// settle waits until every accepted message was delivered, then makes sure nothing else is
// on its way: the consumer opens a new stream (which delivers everything unconfirmed first)
// and the producer sends a sentinel behind it; once the sentinel is in, what the consumer saw
// is final. The caller cancels ctx afterwards and calls stop.
func (fl *flow) settle(t testing.TB, ctx context.Context, timeout time.Duration) {
	t.Helper()
	p, c := fl.p, fl.c
	fl.wait()
	p.mu.Lock()
	want := make([]int, 0, len(p.accepted))
	for i := range p.accepted {
		want = append(want, i)
	}
	p.mu.Unlock()
	_ = waitFor(timeout, 50*time.Millisecond, func() bool {
		for _, i := range want {
			if !c.has(i) {
				return false
			}
		}
		return true
	})
	select {
	case c.reset <- struct{}{}:
	default:
	}
	sentinel := fmt.Sprintf("end-%d", time.Now().UnixNano())
	body, _ := json.Marshal(payload{Sentinel: sentinel})
	err := waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := p.agent.Send(sctx, sdk.Message{To: p.to, Payload: body, IdempotencyToken: sentinel})
		code, _ := rejectedCode(err)
		return err == nil || code == commonpb.ErrorCode_ALREADY_IN_PROGRESS
	})
	if err != nil {
		t.Errorf("the end-of-run sentinel could not be sent")
		return
	}
	if err := waitFor(30*time.Second, 50*time.Millisecond, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.sentinels[sentinel]
	}); err != nil {
		t.Errorf("the end-of-run sentinel never arrived")
	}
}

// stop waits for the senders and the consumers once ctx is cancelled.
func (fl *flow) stop() {
	fl.senders()
	for _, w := range fl.consumers {
		w()
	}
}

// figures adds the flow's counts to f: accepted, lost and duplicated messages, and as a
// problem any message B confirmed that A was then told TIMED_OUT (§11: the timeout is "10 s
// to RECEIVED").
func (fl *flow) figures(f *figures) {
	p, c, in := fl.p, fl.c, fl.inbox
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	f.accepted += len(p.accepted)
	var lost []int
	for i := range p.accepted {
		if len(c.delivered[i]) == 0 {
			lost = append(lost, i)
		}
	}
	dup := 0
	for i, ids := range c.delivered {
		if len(ids) > 1 || c.afterConfirm[i] {
			dup++
		}
	}
	confirmedTimedOut := 0
	for id := range in.timedOut {
		if c.confirmed[id] {
			confirmedTimedOut++
		}
	}
	f.lost += len(lost)
	f.duplicated += dup
	f.add("messages=%d send_errors=%d retried=%d buffer_full=%d deliveries=%d streams=%d timed_out=%d",
		len(p.accepted), p.errors.Load(), p.retried, p.full, c.deliveries, c.streams, len(in.timedOut))
	if len(p.rejected) > 0 {
		f.problem("messages refused: %v", p.rejected)
	}
	if len(p.gaveUp) > 0 {
		f.problem("%d messages got no answer within a minute: %v", len(p.gaveUp), head(p.gaveUp, 10))
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		f.add("lost_numbers=%v", head(lost, 10))
	}
	if confirmedTimedOut > 0 {
		f.problem("%d messages the consumer received and confirmed ended TIMED_OUT (reported to the producer)", confirmedTimedOut)
	}
}

// audit adds how many delivered messages have no message.admitted audit row to f; any is a
// problem (§19). The row is written in the admission's transaction, so not even a process
// killed with kill -9 leaves an admitted message without one.
func (fl *flow) audit(t testing.TB, f *figures, pg *pgCluster) {
	t.Helper()
	fl.c.mu.Lock()
	var ids []string
	for _, m := range fl.c.delivered {
		for id := range m {
			ids = append(ids, id)
		}
	}
	fl.c.mu.Unlock()
	n, err := pg.unaudited(ids, 10*time.Second)
	if err != nil {
		f.problem("read the audit log: %v", err)
		return
	}
	f.add("unaudited=%d", n)
	if n > 0 {
		f.problem("%d admitted messages have no message.admitted audit row (§19)", n)
	}
}

func head(s []int, n int) []int {
	if len(s) > n {
		return s[:n]
	}
	return s
}
