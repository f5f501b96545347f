// Package support is the swarm of the handoff example (RFC §17.6, docs/handoff.md): a triage
// agent hands a billing ticket to whichever agent has the "billing" capability, without
// naming one. Three agents have it, and routing offers the ticket to them in turn:
//
//   - billing-busy answers OVERLOADED: the handoff is offered to it again after a backoff,
//     and once the request's one retry is spent it moves on to the next capable agent;
//   - billing-desk, the old billing desk, REDIRECTs it to the expert; the request allows
//     spillover routing, without which a REDIRECT is not followed (docs/handoff.md, "Retries
//     and redirects");
//   - billing-expert reads the ticket from the handoff's context snapshot, accepts and
//     completes.
//
// Triage is then fenced on the ticket's correlation: its next message about the ticket is
// refused. Run drives it against a server and deregisters every agent it registered;
// examples/handoff's main and an end-to-end test both call it.
package support

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/handoff"
)

// Capability is the capability the ticket needs and the three specialists declare.
const Capability = "billing"

// The request's SwarmDelegationPolicy (docs/handoff.md, "Retries and redirects").
const (
	// OverloadRetries is how often an OVERLOADED agent is offered the handoff again.
	OverloadRetries = 1
	// RetryAfter is the busy agent's retry_after and the policy's initial backoff.
	RetryAfter = 500 * time.Millisecond
	// MaxRedirects bounds the REDIRECTs followed.
	MaxRedirects = 2
)

// Options tunes Run; the zero value is fine.
type Options struct {
	// Out receives what the agents and the driver print; nil means standard output.
	Out io.Writer
	// Wait bounds the wait for the handoff to complete; zero means two minutes.
	Wait time.Duration
}

// Answer is one offer a specialist answered, as it answered it.
type Answer struct {
	// Agent is the specialist offered the handoff.
	Agent string
	// Answer is OVERLOADED, REDIRECT or ACCEPTED.
	Answer string
	// RedirectTo is a REDIRECT's target.
	RedirectTo string
}

// Result is what Run saw.
type Result struct {
	// Suffix is the run's unique suffix, part of every agent, ticket and handoff id.
	Suffix string
	// Triage, Busy, Desk and Expert are the agents' ids.
	Triage, Busy, Desk, Expert string
	// Ticket is the correlation handed off; Handoff the handoff's request_id (its workflow is
	// handoff/<Handoff>).
	Ticket, Handoff string
	// Registered are the agents Run registered, in order; Deregistered those it deregistered
	// when it ended.
	Registered, Deregistered []string
	// Answers are the offers the specialists answered, in order.
	Answers []Answer
	// Read is the ticket the expert read from the context snapshot.
	Read Ticket
	// Events are the handoff events triage received, in order (handoff_accepted, …).
	Events []string
	// AcceptedBy is the agent handoff_accepted named.
	AcceptedBy string
	// FenceCode and Fence are the error_code and the reason with which the router refused
	// triage's message on the ticket after the handoff completed.
	FenceCode commonpb.ErrorCode
	Fence     string
}

// Ticket is the context snapshot triage hands off (application/json).
type Ticket struct {
	// ID is the ticket's id, also the handoff's correlation.
	ID string `json:"id"`
	// Customer, Summary and Notes describe the case.
	Customer string `json:"customer"`
	Summary  string `json:"summary"`
	Notes    string `json:"notes"`
}

// printer writes one line per call, so that concurrent agents do not interleave.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, "%-24s %s\n", who, fmt.Sprintf(format, args...))
}

// swarm is one run's agents and what they saw.
type swarm struct {
	server string
	p      *printer
	res    *Result

	mu     sync.Mutex
	agents []*sdk.Agent

	// watching ends the agents' streams; watchers counts the goroutines reading them.
	watching context.CancelFunc
	watchers sync.WaitGroup
}

// Run registers the swarm's agents at server (host:port), hands the ticket off, checks that
// triage is fenced, and deregisters every agent it registered, whatever happened. It returns
// an error when the story does not happen as the example says: the handoff rejected or
// expired, not completed within Options.Wait, or triage not fenced.
func Run(ctx context.Context, server string, opts Options) (*Result, error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Minute
	}
	suffix := uuid.NewString()[:8]
	// The three specialists are equally idle, so routing, which ranks capable agents by load
	// and then by agent_id, offers the ticket to busy, then desk, then expert: the order the
	// story needs.
	res := &Result{Suffix: suffix, Triage: "triage-" + suffix, Busy: "billing-busy-" + suffix, Desk: "billing-desk-" + suffix,
		Expert: "billing-expert-" + suffix, Ticket: "ticket-" + suffix, Handoff: "handoff-" + suffix}
	s := &swarm{server: server, p: &printer{out: opts.Out}, res: res}
	err := s.story(ctx, opts.Wait)
	return res, errors.Join(err, s.close(ctx))
}

// story is the example, top to bottom.
func (s *swarm) story(ctx context.Context, wait time.Duration) error {
	res := s.res
	triage, err := s.join(ctx, res.Triage, "triage")
	if err != nil {
		return err
	}
	busy, err := s.join(ctx, res.Busy, "billing", Capability)
	if err != nil {
		return err
	}
	desk, err := s.join(ctx, res.Desk, "billing (old desk)", Capability)
	if err != nil {
		return err
	}
	expert, err := s.join(ctx, res.Expert, "billing (expert)", Capability)
	if err != nil {
		return err
	}

	wctx, cancel := context.WithCancel(ctx)
	s.watching = cancel
	events := make(chan handoff.Event, 16)
	expertDone := make(chan struct{})
	s.watch(wctx, busy, s.busy(busy))
	s.watch(wctx, desk, s.redirecting(desk, res.Expert))
	s.watch(wctx, expert, s.expert(expert, expertDone))
	s.watch(wctx, triage, func(ctx context.Context, e handoff.Event) {
		select {
		case events <- e:
		case <-ctx.Done():
		}
	})
	for _, a := range []*sdk.Agent{triage, busy, desk, expert} {
		// Opening the stream made each agent ready; a heartbeat says so at once, so that the
		// routing sees every specialist RUNNABLE.
		if err := a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil); err != nil {
			return fmt.Errorf("heartbeat of %s: %w", a.ID(), err)
		}
	}
	time.Sleep(time.Second)

	ticket, err := json.Marshal(Ticket{ID: res.Ticket, Customer: "ACME Corp", Summary: "charged twice for the March invoice",
		Notes: "card ending 4242; customer wants a refund of the duplicate"})
	if err != nil {
		return err
	}
	s.p.say(res.Triage, "hands off %s as %s to any agent with [%s]: %d retry on OVERLOADED, spillover allowed, at most %d redirects",
		res.Ticket, res.Handoff, Capability, OverloadRetries, MaxRedirects)
	// AllowSpilloverRouting is what lets the desk's REDIRECT be followed (and the busy agent's
	// refusal go on to the next candidate): with it off a REDIRECT goes back to triage.
	if _, err := handoff.New(triage).Request(ctx, handoff.Request{
		ID: res.Handoff, Capabilities: []string{Capability}, Reason: "billing dispute: needs a billing specialist",
		Context: ticket, Priority: 5, Timeout: time.Minute,
		Policy: &handoffpb.SwarmDelegationPolicy{MaxRetriesOnOverloaded: OverloadRetries, InitialBackoffMs: uint64(RetryAfter.Milliseconds()),
			BackoffMultiplier: 2, MaxBackoffMs: 2000, AllowSpilloverRouting: true, MaxRedirects: MaxRedirects},
	}, handoff.WithCorrelation(res.Ticket), handoff.WithContentType("application/json")); err != nil {
		return err
	}

	// Triage's own line comes once the expert is done too, so that the output has one order.
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for completed := false; !completed || expertDone != nil; {
		select {
		case e := <-events:
			res.Events = append(res.Events, e.Kind)
			switch e.Kind {
			case handoff.EventAccepted:
				res.AcceptedBy = e.String("accepted_by")
			case handoff.EventCompleted:
				completed = true
			default:
				return fmt.Errorf("the handoff ended %s: %s", e.Kind, e.String("reason"))
			}
		case <-expertDone:
			expertDone = nil
		case <-deadline.C:
			return fmt.Errorf("the handoff did not complete within %s (is a worker running? `make dev` runs one)", wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.p.say(res.Triage, "told %s: %s accepted it and took the ticket over", strings.Join(res.Events, ", "), res.AcceptedBy)

	// §17.6: the originator MUST NOT continue work on the transferred context. The fence
	// reaches every frontend's router within about a second (it polls the fences every
	// 250 ms): waiting a moment first keeps a message from reaching the expert before it.
	for start := time.Now(); ; {
		time.Sleep(300 * time.Millisecond)
		_, err := triage.Send(ctx, sdk.Message{To: res.Expert, CorrelationID: res.Ticket, Payload: []byte(`{"note":"one more thing"}`)})
		if code := sdk.CodeOf(err); code == commonpb.ErrorCode_PERMISSION_DENIED {
			var re *sdk.RejectedError
			errors.As(err, &re)
			res.FenceCode, res.Fence = code, re.Reason
			s.p.say(res.Triage, "tries to add a note to %s: refused: %s", res.Ticket, res.Fence)
			break
		}
		if err != nil {
			return err
		}
		if time.Since(start) > 5*time.Second {
			return errors.New("triage was not fenced after the handoff completed")
		}
	}
	s.p.say("", "done: %s went from %s past %s and %s to %s", res.Ticket, res.Triage, res.Busy, res.Desk, res.Expert)
	return nil
}

// join registers agent id with a description and, for a specialist, its capabilities.
func (s *swarm) join(ctx context.Context, id, description string, capabilities ...string) (*sdk.Agent, error) {
	a, err := sdk.Dial(s.server, id)
	if err != nil {
		return nil, err
	}
	d := &registrypb.AgentDescriptor{Name: strings.TrimSuffix(id, "-"+s.res.Suffix), Description: "handoff example: " + description,
		Capabilities: capabilities}
	if err := a.Register(ctx, d); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("register %s (is the server running? `make dev`): %w", id, err)
	}
	s.mu.Lock()
	s.agents = append(s.agents, a)
	s.res.Registered = append(s.res.Registered, id)
	s.mu.Unlock()
	if len(capabilities) > 0 {
		s.p.say(id, "registered with %v", capabilities)
	} else {
		s.p.say(id, "registered")
	}
	return a, nil
}

// watch reads a's stream until ctx ends, handing every handoff event to fn.
func (s *swarm) watch(ctx context.Context, a *sdk.Agent, fn func(context.Context, handoff.Event)) {
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		if err := handoff.New(a).Watch(ctx, fn); err != nil {
			s.p.say(a.ID(), "stream ended: %v", err)
		}
	}()
}

// close ends the streams first — a watcher ends only when its stream does — then deregisters
// and disconnects every agent, with a context of its own: Run's may be cancelled already. It
// returns the deregistrations that failed.
func (s *swarm) close(ctx context.Context) error {
	if s.watching != nil {
		s.watching()
	}
	s.watchers.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, a := range s.agents {
		if err := a.Deregister(cctx, "handoff example finished"); err != nil {
			errs = append(errs, fmt.Errorf("deregister %s: %w", a.ID(), err))
		} else {
			s.res.Deregistered = append(s.res.Deregistered, a.ID())
			s.p.say(a.ID(), "deregistered")
		}
		_ = a.Close()
	}
	s.agents = nil
	return errors.Join(errs...)
}

// answered records a specialist's answer.
func (s *swarm) answered(a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Answers = append(s.res.Answers, a)
}

// busy answers every offer OVERLOADED: the handoff is offered to it again after the backoff,
// then, its retries spent, to the next capable agent. It prints before it answers, so that
// its line comes before whatever the answer causes.
func (s *swarm) busy(a *sdk.Agent) func(context.Context, handoff.Event) {
	c := handoff.New(a)
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		s.answered(Answer{Agent: a.ID(), Answer: "OVERLOADED"})
		s.p.say(a.ID(), "offered %s by %s -> OVERLOADED (retry after %s)", e.RequestID, e.Offer.From, RetryAfter)
		if _, err := c.Reject(ctx, e.RequestID, handoff.Overloaded("queue full: 40 tickets waiting", RetryAfter)); err != nil {
			s.p.say(a.ID(), "reject %s failed: %v", e.RequestID, err)
		}
	}
}

// redirecting sends every offer on to the agent that handles billing disputes now.
func (s *swarm) redirecting(a *sdk.Agent, to string) func(context.Context, handoff.Event) {
	c := handoff.New(a)
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		s.answered(Answer{Agent: a.ID(), Answer: "REDIRECT", RedirectTo: to})
		s.p.say(a.ID(), "offered %s -> REDIRECT to %s: disputes moved to the expert desk", e.RequestID, to)
		if _, err := c.Reject(ctx, e.RequestID, handoff.Redirect(to, "disputes moved to the expert desk")); err != nil {
			s.p.say(a.ID(), "reject %s failed: %v", e.RequestID, err)
		}
	}
}

// expert reads the ticket from the snapshot, accepts and completes the handoff, then closes
// done.
func (s *swarm) expert(a *sdk.Agent, done chan<- struct{}) func(context.Context, handoff.Event) {
	c := handoff.New(a)
	var once sync.Once
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		defer once.Do(func() { close(done) })
		// The notification does not carry the snapshot; the pending request does, while the
		// handoff waits for an answer.
		p, ok, err := c.Fetch(ctx, e.RequestID)
		switch {
		case err != nil:
			s.p.say(a.ID(), "could not read %s: %v", e.RequestID, err)
		case !ok:
			s.p.say(a.ID(), "%s is not pending for me any more", e.RequestID)
		default:
			var t Ticket
			if err := json.Unmarshal(p.Request.GetContextSnapshot(), &t); err != nil {
				s.p.say(a.ID(), "the snapshot of %s is not a ticket: %v", e.RequestID, err)
			}
			s.mu.Lock()
			s.res.Read = t
			s.mu.Unlock()
		}
		if _, err := c.Accept(ctx, e.RequestID); err != nil {
			s.p.say(a.ID(), "accept %s failed: %v", e.RequestID, err)
			return
		}
		s.answered(Answer{Agent: a.ID(), Answer: "ACCEPTED"})
		s.p.say(a.ID(), "offered %s (%s, %d bytes of %s) -> accepted", e.RequestID, e.Offer.Reason, e.Offer.ContextBytes, e.Offer.ContentType)
		if t := s.read(); t.ID != "" {
			s.p.say(a.ID(), "working on %s for %s: %s", t.ID, t.Customer, t.Summary)
		}
		msg, err := c.Complete(ctx, e.RequestID)
		if err != nil {
			s.p.say(a.ID(), "complete %s failed: %v", e.RequestID, err)
			return
		}
		s.p.say(a.ID(), "completed: %s", msg)
	}
}

// read returns the ticket the expert read.
func (s *swarm) read() Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res.Read
}
