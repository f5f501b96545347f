package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestWorkerKilledMidDebate: one `sw4rm server` and two `sw4rm worker`s share PostgreSQL and
// Temporal; three SDK agents serve ADR-011 debate turns (docs/negotiation.md, "Debate turns
// as tasks"), each turn taking 300 ms and bringing a new claim, so that the debate runs all
// its 3 rounds. When the first turn of round 2 starts, the worker that runs the negotiation's
// workflow tasks is killed with SIGKILL. The debate decides on the worker that is left with 3
// rounds and 9 turns, every later round's turns carry the whole transcript before them,
// every (round, agent) turn ran exactly once, as the agents count them, and the opener got
// every event — open, policy, the 9 turns, decide — once, in seq order.
func TestWorkerKilledMidDebate(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, dir, 2)
	ts, server, workers := d.ts, d.server, d.workers

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rounds = 3
	id := agentID("debate")
	// The opener receives every event beside the participants: it reads them as a party.
	parent := newParty(t, server.addr, "parent", id)
	dctx, dcancel := context.WithCancel(ctx) // the debaters serve until the debate ended
	defer dcancel()
	var debaters []*debater
	var ids []string
	var stops []func()
	for i, verdict := range []string{"approve", "approve", "reject"} {
		a := dialAgent(t, server.addr, agentID("debater"))
		register(t, a, "debater")
		d := newDebater(a, i, verdict, 300*time.Millisecond)
		debaters = append(debaters, d)
		ids = append(ids, a.ID())
		stops = append(stops, d.serve(dctx))
	}

	waits := []func(){parent.start(ctx)}
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	err := parent.nc.Open(octx, negotiation.Options{ID: id, Topic: "Adopt the new cache layer?", Participants: ids,
		Debate: true, Rounds: rounds, Timeout: 5 * time.Minute})
	ocancel()
	if err != nil {
		t.Fatalf("open the debate: %v", err)
	}

	// Kill mid-debate: round 1 is complete, round 2's turns are running.
	if err := waitFor(time.Minute, 10*time.Millisecond, func() bool { return startedRound(debaters, 2) }); err != nil {
		t.Fatalf("round 2 never started (turns run: %v)", turnRuns(debaters))
	}
	wfID := workflows.NegotiationWorkflowID(id)
	victim := dagRunWorker(ctx, t, ts, wfID, workers)
	victim.kill()
	killedAt := time.Now()
	startedBeforeKill := turnRuns(debaters)

	f := figures{scenario: "worker-kill-debate"}
	var st workflows.NegotiationState
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = ts.client.GetWorkflow(gctx, wfID, "").Get(gctx, &st)
	gcancel()
	recovery := time.Since(killedAt)
	dcancel()
	for _, stop := range stops {
		stop()
	}
	// Every event reached the opener once: open, policy, each turn, decide.
	want := []string{"open", "policy"}
	for r := 1; r <= rounds; r++ {
		for range debaters {
			want = append(want, map[bool]string{true: "propose", false: "counter"}[r == 1])
		}
	}
	want = append(want, "decide")
	if waitFor(30*time.Second, 20*time.Millisecond, func() bool { return parent.hasSeq(len(want)) }) != nil {
		f.problem("the opener never received event %d", len(want))
	}
	parent.settle(ctx, &f, debaters[0].agent)
	cancel()
	for _, w := range waits {
		w()
	}
	parent.figures(&f, want, func(e negotiation.Event) string {
		if e.Kind != "propose" && e.Kind != "counter" {
			return ""
		}
		n := slices.Index(ids, e.From)
		text, err := e.Payload()
		if err != nil || !strings.HasPrefix(string(text), fmt.Sprintf("In round %d debater %d ", e.Round, n)) {
			return fmt.Sprintf("the round %d turn of %s carries %q", e.Round, e.From, text)
		}
		return ""
	})

	// Every turn is one accepted unit of work: it must have run once, no more, no less.
	runs := turnRuns(debaters)
	f.accepted = rounds * len(debaters)
	total := 0
	for r := 1; r <= rounds; r++ {
		for i := range debaters {
			n := runs[turnKey{round: r, agent: i}]
			total += n
			switch {
			case n == 0:
				f.strandedTasks++
				f.problem("the turn of debater %d in round %d never ran", i, r)
			case n > 1:
				f.duplicated++
				f.problem("the turn of debater %d in round %d ran %d times", i, r, n)
			}
		}
	}
	for _, d := range debaters {
		for key, seen := range d.transcriptSeen() {
			if earlier := (key.round - 1) * len(debaters); seen != earlier {
				f.problem("debater %d's turn in round %d carried %d earlier turns, want %d", d.n, key.round, seen, earlier)
			}
		}
	}
	switch {
	case err != nil:
		f.problem("the negotiation did not end within 2 minutes of the kill: %v", err)
	case st.Status != workflows.NegotiationDecided:
		f.problem("the negotiation ended %s (%s), not decided", st.Status, st.AbortReason)
	default:
		var res debate.Result
		if err := json.Unmarshal(st.Result, &res); err != nil {
			f.problem("the decided result is not a debate result: %v", err)
			break
		}
		if res.Mode != "debate" || res.RoundsRun != rounds || res.StopReason != debate.StopRounds {
			f.problem("the result is mode %s, %d rounds, stop %s; want debate, %d rounds, stop %s", res.Mode, res.RoundsRun, res.StopReason, rounds, debate.StopRounds)
		}
		if len(res.Transcript) != rounds*len(debaters) {
			f.problem("the transcript has %d turns, want %d", len(res.Transcript), rounds*len(debaters))
		}
		seen := map[turnKey]int{}
		for _, turn := range res.Transcript {
			seen[turnKey{round: turn.Round, agent: slices.Index(ids, turn.Agent)}]++
		}
		for key, n := range seen {
			if n != 1 || key.agent < 0 {
				f.problem("the transcript holds the turn of agent %d in round %d %d times", key.agent, key.round, n)
			}
		}
		if len(res.Verdicts) != len(debaters) || res.Majority != "approve" {
			f.problem("%d verdicts with majority %q, want %d and approve", len(res.Verdicts), res.Majority, len(debaters))
		}
		f.add("rounds_run=%d transcript=%d verdicts=%d", res.RoundsRun, len(res.Transcript), len(res.Verdicts))
	}
	before := 0
	for key, n := range startedBeforeKill {
		before += n
		if key.round == rounds {
			f.problem("the final round had started before the kill: it did not land mid-debate")
		}
	}
	f.add("turns=%d turn_runs=%d started_before_kill=%d killed=%s recovery_s=%.1f", f.accepted, total, before, victim.name, recovery.Seconds())
	f.report(t)
}

// turnKey names one turn: a round and the debater's index.
type turnKey struct{ round, agent int }

// debater is an agent process serving debate turns with the SDK's Serve: each turn takes work
// and states a claim of its own round (so that no round converges and the debate runs every
// round); the final one ends with the debater's FINAL_VERDICT. It counts every handler run.
type debater struct {
	agent   *sdk.Agent
	n       int
	verdict string
	work    time.Duration

	mu     sync.Mutex
	runs   map[turnKey]int
	before map[turnKey]int // the transcript's length each turn received
}

func newDebater(a *sdk.Agent, n int, verdict string, work time.Duration) *debater {
	return &debater{agent: a, n: n, verdict: verdict, work: work, runs: map[turnKey]int{}, before: map[turnKey]int{}}
}

func (d *debater) handle(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
	p, ok, err := negotiation.Turn(run.Task())
	if !ok || err != nil {
		return nil, fmt.Errorf("task %s is not a debate turn: %v", run.Task().ID, err)
	}
	key := turnKey{round: p.Round, agent: d.n}
	d.mu.Lock()
	d.runs[key]++
	d.before[key] = len(p.Transcript)
	d.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(d.work):
	}
	text := fmt.Sprintf("In round %d debater %d raises point %d-%d.", p.Round, d.n, p.Round, d.n)
	if p.Final {
		text += "\n" + negotiation.FinalVerdict(d.verdict, map[string]float64{"approve": 8, "reject": 3}[d.verdict], 0.9)
	}
	return []byte(text), nil
}

// serve runs the agent until ctx ends, serving again whenever Serve returns; the returned
// function waits for it.
func (d *debater) serve(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = d.agent.Serve(ctx, d.handle, nil)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { <-done }
}

// transcriptSeen returns, per turn, how many earlier turns its transcript carried.
func (d *debater) transcriptSeen() map[turnKey]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.before)
}

// startedRound reports whether a turn of round r started on any debater.
func startedRound(ds []*debater, r int) bool {
	for _, d := range ds {
		d.mu.Lock()
		n := d.runs[turnKey{round: r, agent: d.n}]
		d.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// turnRuns sums the debaters' handler runs per turn.
func turnRuns(ds []*debater) map[turnKey]int {
	out := map[turnKey]int{}
	for _, d := range ds {
		d.mu.Lock()
		for k, n := range d.runs {
			out[k] += n
		}
		d.mu.Unlock()
	}
	return out
}

// contract drafts of TestFrontendKilledMidNegotiation: v2 changes only the price, within
// LOW's diff tolerance, so the buyer's evaluation of it reaches acceptance.
var (
	contractV1 = []byte(`{"api":"orders","price":120,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
	contractV2 = []byte(`{"api":"orders","price":110,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
)

// TestFrontendKilledMidNegotiation: one `sw4rm server` and one `sw4rm worker` share
// PostgreSQL and Temporal; a buyer opens a contract negotiation with a seller and proposes.
// The frontend is then killed with SIGKILL twice, each time while a participant's call is
// in flight — the seller's Counter, then the buyer's Evaluate — and started again on the
// same address. To make the kill land mid-call, the worker is stalled (SIGSTOP) before the
// call and let go (SIGCONT) once the frontend is back: the call has reached Temporal, and
// its caller never hears the answer. Each participant's SDK client retries its call on the
// restarted frontend with the same sw4rm-idempotency-key, and is answered with the first
// attempt's outcome. The negotiation decides v2 by consensus; both participants' event
// streams hold every event of the negotiation exactly once after de-duplication by
// message_id and seq — open, policy, propose, counter, evaluate, decide, seq 1..6 with no
// gap, each first seen in seq order — and the drafts' bytes as they were sent.
func TestFrontendKilledMidNegotiation(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, dir, 1)
	ts, server, worker := d.ts, d.server, d.workers[0]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := agentID("neg")
	buyer := newParty(t, server.addr, "buyer", id)
	seller := newParty(t, server.addr, "seller", id)
	waits := []func(){buyer.start(ctx), seller.start(ctx)}
	wfID := workflows.NegotiationWorkflowID(id)

	f := figures{scenario: "frontend-kill-negotiation"}
	calls := map[string]callResult{}
	call := func(name string, p *party, fn func(context.Context, *negotiation.Client) error) bool {
		res := p.retried(ctx, fn)
		calls[name] = res
		if res.err != nil {
			f.problem("%s by the %s: %v (after %d attempts)", name, p.name, res.err, res.attempts)
			return false
		}
		return true
	}
	// killDuring makes the frontend die while fn is in flight (see the test's comment).
	killDuring := func(name string, p *party, fn func(context.Context, *negotiation.Client) error) bool {
		if err := waitIdle(ctx, ts, wfID); err != nil {
			f.problem("before the %s: %v", name, err)
			return false
		}
		worker.pause()
		done := make(chan callResult, 1)
		go func() { done <- p.retried(ctx, fn) }()
		reached := waitPendingTask(ctx, ts, wfID)
		server.kill()
		server.restart()
		worker.resume()
		res := <-done
		calls[name] = res
		if reached != nil {
			f.problem("the %s never reached the negotiation's workflow before the kill: %v", name, reached)
		}
		if res.err != nil {
			f.problem("%s by the %s: %v (after %d attempts)", name, p.name, res.err, res.attempts)
			return false
		}
		if res.attempts < 2 {
			f.problem("the %s was answered by its first attempt: the kill did not land mid-call", name)
		}
		return true
	}

	ok := call("open", buyer, func(ctx context.Context, nc *negotiation.Client) error {
		return nc.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders", Participants: []string{buyer.agent.ID(), seller.agent.ID()},
			Intensity: commonpb.DebateIntensity_LOW, Timeout: 5 * time.Minute})
	}) && call("propose", buyer, func(ctx context.Context, nc *negotiation.Client) error {
		return nc.Propose(ctx, id, "application/json", contractV1)
	}) && killDuring("counter", seller, func(ctx context.Context, nc *negotiation.Client) error {
		return nc.Counter(ctx, id, "application/json", contractV2)
	})
	// The buyer evaluates v2 once it has seen it, as a participant does.
	if ok && waitFor(time.Minute, 20*time.Millisecond, func() bool { return buyer.hasKind("counter") }) != nil {
		f.problem("the buyer never received the counter event")
		ok = false
	}
	if ok {
		killDuring("evaluate", buyer, func(ctx context.Context, nc *negotiation.Client) error {
			return nc.Evaluate(ctx, id, 0.97, "fair price")
		})
	}

	var st workflows.NegotiationState
	gctx, gcancel := context.WithTimeout(ctx, time.Minute)
	err := ts.client.GetWorkflow(gctx, wfID, "").Get(gctx, &st)
	gcancel()
	switch {
	case err != nil:
		f.problem("the negotiation did not end: %v", err)
	case st.Status != workflows.NegotiationDecided || st.Decision.GetDecidedBy() != "consensus":
		f.problem("the negotiation ended %s by %q (%s), want decided by consensus", st.Status, st.Decision.GetDecidedBy(), st.Decision.GetRationale())
	case string(st.Result) != string(contractV2) || len(st.Versions) != 2:
		f.problem("decided %s after %d versions, want v2 after 2", st.Result, len(st.Versions))
	}
	// Every event the workflow published reaches both participants: wait for the last one,
	// then for a fresh stream of each, which delivers whatever is still unconfirmed first.
	want := []string{"open", "policy", "propose", "counter", "evaluate", "decide"}
	if st.Events != len(want) {
		f.problem("the negotiation published %d events, want %d", st.Events, len(want))
	}
	for _, p := range []*party{buyer, seller} {
		if waitFor(30*time.Second, 20*time.Millisecond, func() bool { return p.hasSeq(max(st.Events, len(want))) }) != nil {
			f.problem("the %s never received event %d", p.name, max(st.Events, len(want)))
		}
	}
	buyer.settle(ctx, &f, seller.agent)
	seller.settle(ctx, &f, buyer.agent)
	cancel()
	for _, w := range waits {
		w()
	}

	for _, p := range []*party{buyer, seller} {
		f.accepted += len(want) // every event, to each participant
		p.figures(&f, want, func(e negotiation.Event) string {
			var got []byte
			var err error
			var exp []byte
			switch e.Kind {
			case "propose":
				got, err = e.Payload()
				exp = contractV1
			case "counter":
				got, err = e.Payload()
				exp = contractV2
			case "decide":
				got, err = e.Result()
				exp = contractV2
			default:
				return ""
			}
			if err != nil || string(got) != string(exp) {
				return fmt.Sprintf("its %s event carries %q, want %q", e.Kind, got, exp)
			}
			return ""
		})
	}
	for name, res := range calls {
		f.add("%s_attempts=%d", name, res.attempts)
	}
	f.add("frontend_runs=%d", server.runs)
	f.report(t)
}

// waitIdle waits until the workflow has neither a workflow task nor an activity pending:
// what the last call started is done, and stalling the worker holds nothing back but the
// next call.
func waitIdle(ctx context.Context, ts *temporalServer, wfID string) error {
	return waitFor(30*time.Second, 20*time.Millisecond, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		d, err := ts.client.DescribeWorkflowExecution(dctx, wfID, "")
		return err == nil && d.GetPendingWorkflowTask() == nil && len(d.GetPendingActivities()) == 0
	})
}

// waitPendingTask waits until the idle workflow has a workflow task pending: Temporal took
// an update for it, which only the (stalled) worker can apply.
func waitPendingTask(ctx context.Context, ts *temporalServer, wfID string) error {
	return waitFor(30*time.Second, 10*time.Millisecond, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		d, err := ts.client.DescribeWorkflowExecution(dctx, wfID, "")
		return err == nil && d.GetPendingWorkflowTask() != nil
	})
}

// callResult is the end of one logical call: its last answer and how many attempts it took.
type callResult struct {
	err      error
	attempts int
}

// party is a negotiation participant's process: an SDK agent that makes its negotiation
// calls and reads its inbound stream, confirming every delivery and recording the
// negotiation's events. A stream that fails, or whose confirmation fails, is opened again;
// the server delivers whatever was not confirmed first.
type party struct {
	name  string
	agent *sdk.Agent
	nc    *negotiation.Client
	negID string
	reset chan struct{}

	mu           sync.Mutex
	events       []eventSeen     // every delivery of the negotiation's events, in order
	confirmed    map[string]bool // message_ids whose confirmation was recorded
	afterConfirm map[string]bool // message_ids delivered again after a recorded confirmation
	streams      int             // streams opened
	sentinels    map[string]bool // settle's sentinels received
}

// eventSeen is one delivery of a negotiation event.
type eventSeen struct {
	messageID string
	stream    int   // the stream it came on, from 1
	seq       int64 // its delivery seq in the agent's buffer
	at        time.Time
	ev        negotiation.Event
	err       error // the payload did not decode
}

func newParty(t testing.TB, addr, name, negID string) *party {
	a := dialAgent(t, addr, agentID(name))
	register(t, a, name)
	return &party{name: name, agent: a, nc: negotiation.New(a), negID: negID, reset: make(chan struct{}, 1),
		confirmed: map[string]bool{}, afterConfirm: map[string]bool{}, sentinels: map[string]bool{}}
}

// retried makes one logical call as a participant that must ride out a frontend restart
// does: every attempt carries the same idempotency key, an attempt that got no answer from
// the system (Unavailable, the attempt's own deadline) is made again after 100 ms, and any
// answer ends the call. It gives up after a minute.
func (p *party) retried(ctx context.Context, fn func(context.Context, *negotiation.Client) error) callResult {
	ctx, cancel := context.WithTimeout(negotiation.WithIdempotencyKey(ctx, uuid.NewString()), time.Minute)
	defer cancel()
	for n := 1; ; n++ {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		err := fn(actx, p.nc)
		acancel()
		if c := status.Code(err); err == nil || (c != codes.Unavailable && c != codes.DeadlineExceeded) {
			return callResult{err: err, attempts: n}
		}
		select {
		case <-ctx.Done():
			return callResult{err: err, attempts: n}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start reads the agent's stream until ctx ends; the returned function waits for it.
func (p *party) start(ctx context.Context) (wait func()) {
	return streamReader{agent: p.agent, reset: p.reset, mu: &p.mu, streams: &p.streams, handle: p.handle}.start(ctx)
}

// handle records one delivery (a negotiation event of the party's negotiation, or a
// sentinel) and confirms it; false ends the stream.
func (p *party) handle(ctx context.Context, d *sdk.Delivery) bool {
	env := d.Envelope
	id := env.GetMessageId()
	ours := env.GetMessageType() == commonpb.MessageType_NEGOTIATION && env.GetCorrelationId() == p.negID
	p.mu.Lock()
	if ours {
		ev, _, perr := negotiation.ParseEvent(env)
		p.events = append(p.events, eventSeen{messageID: id, stream: p.streams, seq: d.Seq, at: time.Now(), ev: ev, err: perr})
		if p.confirmed[id] {
			p.afterConfirm[id] = true
		}
	} else if sp := (payload{}); env.GetMessageType() == commonpb.MessageType_DATA && d.DecodeJSON(&sp) == nil && sp.Sentinel != "" {
		p.sentinels[sp.Sentinel] = true
	}
	p.mu.Unlock()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	recorded, err := d.Confirm(cctx)
	ccancel()
	if err != nil {
		return false
	}
	if recorded && ours {
		p.mu.Lock()
		p.confirmed[id] = true
		p.mu.Unlock()
	}
	return true
}

// settle makes what the party saw final: it opens a new stream, which delivers whatever is
// still unconfirmed first, and from sends it a sentinel behind that backlog; once the
// sentinel is in, nothing earlier is on its way.
func (p *party) settle(ctx context.Context, f *figures, from *sdk.Agent) {
	p.mu.Lock()
	before := p.streams
	p.mu.Unlock()
	select {
	case p.reset <- struct{}{}:
	default:
	}
	if waitFor(30*time.Second, 20*time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.streams > before
	}) != nil {
		f.problem("the %s's stream was not opened again", p.name)
		return
	}
	sentinel := "settle-" + uuid.NewString()
	body, _ := json.Marshal(payload{Sentinel: sentinel})
	if waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := from.Send(sctx, sdk.Message{To: p.agent.ID(), Payload: body, IdempotencyToken: sentinel})
		code, _ := rejectedCode(err)
		return err == nil || code == commonpb.ErrorCode_ALREADY_IN_PROGRESS || code == commonpb.ErrorCode_DUPLICATE_DETECTED
	}) != nil {
		f.problem("the sentinel to the %s could not be sent", p.name)
		return
	}
	if waitFor(30*time.Second, 20*time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.sentinels[sentinel]
	}) != nil {
		f.problem("the sentinel to the %s never arrived", p.name)
	}
}

// hasKind reports whether an event of kind was delivered.
func (p *party) hasKind(kind string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.events, func(e eventSeen) bool { return e.ev.Kind == kind })
}

// hasSeq reports whether event seq was delivered.
func (p *party) hasSeq(seq int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.events, func(e eventSeen) bool { return e.ev.Seq == seq })
}

// figures checks the party's deliveries against the negotiation's events: de-duplicated by
// message_id, they are seq 1..len(want) of the kinds in want, each first delivered in seq
// order, one message_id per seq (a second one would be a second publication), and each
// passing check (which returns what is wrong, or ""). Redeliveries under the same message_id are at-least-once delivery and only
// counted.
func (p *party) figures(f *figures, want []string, check func(negotiation.Event) string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := map[string]eventSeen{}  // by message_id
	ids := map[int]map[string]bool{} // seq → message_ids
	var order []int                  // seqs in the order first delivered
	redelivered := 0
	for _, e := range p.events {
		if e.err != nil {
			f.problem("the %s got an undecodable event %s: %v", p.name, e.messageID, e.err)
			continue
		}
		if prev, ok := first[e.messageID]; ok {
			redelivered++
			if prev.ev.Seq != e.ev.Seq || prev.ev.Kind != e.ev.Kind {
				f.problem("the %s got message %s as seq %d %s and again as seq %d %s", p.name, e.messageID, prev.ev.Seq, prev.ev.Kind, e.ev.Seq, e.ev.Kind)
			}
			continue
		}
		first[e.messageID] = e
		if ids[e.ev.Seq] == nil {
			ids[e.ev.Seq] = map[string]bool{}
		}
		ids[e.ev.Seq][e.messageID] = true
		order = append(order, e.ev.Seq)
	}
	for seq := 1; seq <= len(want); seq++ {
		if len(ids[seq]) == 0 {
			f.lost++
			f.problem("the %s never got event %d (%s)", p.name, seq, want[seq-1])
		}
	}
	for seq, m := range ids {
		if len(m) > 1 {
			f.duplicated++
			f.problem("the %s got event %d under %d message_ids", p.name, seq, len(m))
		}
		if seq < 1 || seq > len(want) {
			f.problem("the %s got event %d, beyond the negotiation's %d", p.name, seq, len(want))
		}
	}
	if !slices.IsSorted(order) || len(order) != len(ids) {
		f.problem("the %s first got the events in the order %v, not in seq order (deliveries: %s)", p.name, order, deliveries(p.events))
	}
	var kinds []string
	for _, seq := range order {
		for _, e := range first {
			if e.ev.Seq == seq {
				kinds = append(kinds, e.ev.Kind)
				if why := check(e.ev); why != "" {
					f.problem("the %s's event %d: %s", p.name, seq, why)
				}
				break
			}
		}
	}
	if !slices.Equal(kinds, want) {
		f.problem("the %s's events are %v, want %v (deliveries: %s)", p.name, kinds, want, deliveries(p.events))
	}
	// A control row's confirmation is written behind (router/confirms.go): one the killed
	// frontend had answered but not written comes again, under its message_id, which the
	// participant recognises. Counted, not a failure.
	f.add("%s_deliveries=%d %s_redelivered=%d %s_after_confirm=%d %s_streams=%d", p.name, len(p.events), p.name, redelivered, p.name, len(p.afterConfirm), p.name, p.streams)
}

// deliveries describes the deliveries for a failure message.
func deliveries(es []eventSeen) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "[stream %d buffer seq %d event %d %s at %s] ", e.stream, e.seq, e.ev.Seq, e.ev.Kind, e.at.Format("15:04:05.000"))
	}
	return b.String()
}
