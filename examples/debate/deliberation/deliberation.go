// Package deliberation is the swarm of the debate example (§17, §17.1–§17.4, ADR-011,
// docs/negotiation.md). It has two parts:
//
//  1. A contract negotiation: a buyer and a seller agree on an API contract that a JSON
//     Schema constrains. The buyer's first draft breaks the schema and is refused with its
//     reasons; then a proposal, the seller's evaluation and counter, and the buyer's
//     evaluation reach acceptance, decided by consensus. The buyer prints every §17.1 event as
//     it arrives, and the effective policy.
//  2. ADR-011's A/B harness: three deterministic reviewer agents (an advocate, a skeptic and a
//     pragmatist, see Respond) judge a fixture set of designs with known verdicts, each once
//     as a two-round debate and once as the parallel vote, and the harness prints each mode's
//     accuracy and the lift.
//
// Run drives it against a server; examples/debate's main and an end-to-end test both call it.
package deliberation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// Options tunes Run; the zero value is fine.
type Options struct {
	// Out receives what the agents and the driver print; nil means standard output.
	Out io.Writer
	// Wait bounds each wait for a negotiation to end; zero means two minutes.
	Wait time.Duration
	// Transcripts prints every debate's transcript, not only who changed their mind.
	Transcripts bool
}

// Result is what Run saw.
type Result struct {
	// Suffix is the run's unique suffix, part of every agent and negotiation id.
	Suffix string
	// Contract is the contract negotiation's outcome.
	Contract *ContractResult
	// Harness is the A/B harness's outcome.
	Harness *HarnessResult
	// Registered are the agents Run registered, in order; Deregistered those it deregistered
	// when it ended, whether the parts behaved or not.
	Registered, Deregistered []string
}

// printer writes one line per call, so that concurrent agents do not interleave.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, "%-20s %s\n", who, fmt.Sprintf(format, args...))
}

// line writes text as one line, as it is.
func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, format+"\n", args...)
}

// session is one run's agents and shared bookkeeping.
type session struct {
	server string
	suffix string
	opts   Options
	p      *printer

	mu     sync.Mutex
	agents []*sdk.Agent
	// registered and deregistered are the ids join registered and close deregistered.
	registered, deregistered []string
}

// join registers the agent role-<suffix> and returns it; close deregisters every agent.
func (s *session) join(ctx context.Context, role, description string) (*sdk.Agent, error) {
	id := role + "-" + s.suffix
	a, err := sdk.Dial(s.server, id)
	if err != nil {
		return nil, err
	}
	if err := a.Register(ctx, &registrypb.AgentDescriptor{Name: role, Description: "debate example: " + description}); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("register %s (is the server running? `make dev`): %w", id, err)
	}
	s.mu.Lock()
	s.agents = append(s.agents, a)
	s.registered = append(s.registered, id)
	s.mu.Unlock()
	s.p.say(id, "registered: %s", description)
	return a, nil
}

// close deregisters and disconnects every agent, with a ctx of its own: Run's may be
// cancelled already. It returns the deregistrations that failed: each leaves its agent
// behind on the server.
func (s *session) close(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, a := range s.agents {
		if err := a.Deregister(cctx, "debate example finished"); err != nil {
			errs = append(errs, fmt.Errorf("deregister %s: %w", a.ID(), err))
		} else {
			s.deregistered = append(s.deregistered, a.ID())
		}
		_ = a.Close()
	}
	s.agents = nil
	return errors.Join(errs...)
}

// listener reads an agent's inbound stream, confirms every delivery and hands each
// negotiation event to on, in the order the agent receives them (one per negotiation: the
// workflow publishes them one after the other).
type listener struct {
	stream *sdk.Stream
	done   chan struct{}
}

func listen(ctx context.Context, a *sdk.Agent, on func(negotiation.Event)) (*listener, error) {
	st, err := a.Receive(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the stream of %s: %w", a.ID(), err)
	}
	l := &listener{stream: st, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			d, err := st.Next()
			if err != nil {
				return // the stream was closed, or the server went away: Run's waits time out
			}
			// Confirming frees the delivery's buffer slot; a lost confirmation only means the
			// event comes again on a new stream, and this one is not reopened.
			_, _ = d.Confirm(ctx)
			ev, ok, err := negotiation.ParseEvent(d.Envelope)
			if ok && err == nil {
				on(ev)
			}
		}
	}()
	return l, nil
}

func (l *listener) stop() {
	l.stream.Close()
	<-l.done
}

// waitEvent waits for the first event ch delivers, for at most limit.
func waitEvent(ctx context.Context, ch <-chan negotiation.Event, what string, limit time.Duration) (negotiation.Event, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case ev := <-ch:
		return ev, nil
	case <-t.C:
		return negotiation.Event{}, fmt.Errorf("%s did not end within %s (is a worker running? `make dev` runs one)", what, limit)
	case <-ctx.Done():
		return negotiation.Event{}, ctx.Err()
	}
}

// Run registers the agents at server (host:port), runs the contract negotiation and then the
// A/B harness, and deregisters the agents. It returns an error when either part does not
// behave as the example says: the invalid draft accepted, the contract not decided by
// consensus, or a harness negotiation not decided.
func Run(ctx context.Context, server string, opts Options) (res *Result, err error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Minute
	}
	s := &session{server: server, suffix: uuid.NewString()[:8], opts: opts, p: &printer{out: opts.Out}}
	res = &Result{Suffix: s.suffix}
	defer func() {
		err = errors.Join(err, s.close(ctx))
		res.Registered, res.Deregistered = s.registered, s.deregistered
	}()

	s.p.line("== Part 1: a contract negotiation (§17, §17.1–§17.4) ==")
	res.Contract, err = s.contract(ctx)
	if err != nil {
		return res, fmt.Errorf("contract negotiation: %w", err)
	}
	s.p.line("")
	s.p.line("== Part 2: ADR-011's A/B harness: debate (2 rounds) against the parallel vote ==")
	res.Harness, err = s.harness(ctx)
	if err != nil {
		return res, fmt.Errorf("A/B harness: %w", err)
	}
	return res, nil
}
