// Command handoff runs a support swarm that delegates with the handoff protocol (RFC §17.6)
// against a running SW4RM server: a triage agent hands a billing ticket to whichever agent
// has the "billing" capability, without naming one. Three specialists have it: one is
// overloaded and answers OVERLOADED (the handoff is offered to it again after a backoff, then
// spills over), one is a legacy desk that REDIRECTs to the expert, and the expert accepts,
// reads the ticket from the handoff's context snapshot and completes the handoff. Triage is
// then fenced on the ticket's correlation: its next message about the ticket is refused.
//
// Start a server with `make dev`, then run `make example-handoff` (or
// `go run ./examples/handoff -server host:port`). See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/handoff"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	wait := flag.Duration("wait", 2*time.Minute, "how long triage waits for the handoff to end")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *server, *wait)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nerror:", err)
		os.Exit(1)
	}
}

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// say prints one line per call, so concurrent agents do not interleave.
var sayMu sync.Mutex

func say(who, format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf("%-22s %s\n", who, fmt.Sprintf(format, args...))
}

// Ticket is the context snapshot triage hands off (application/json).
type Ticket struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Summary  string `json:"summary"`
	Notes    string `json:"notes"`
}

// member is one agent of the swarm.
type member struct {
	name   string
	agent  *sdk.Agent
	client *handoff.Client
}

// run is the example: register, hand off, accept, complete, and check what every agent saw.
// It is one function on purpose: an example reads top to bottom as the story it tells.
func run(ctx context.Context, server string, wait time.Duration) error {
	suffix := uuid.NewString()[:8]
	ids := map[string]string{
		"triage":  "triage-" + suffix,
		"busy":    "billing-busy-" + suffix,
		"legacy":  "billing-legacy-" + suffix,
		"expert":  "billing-expert-" + suffix,
		"ticket":  "ticket-" + suffix,
		"handoff": "handoff-" + suffix,
	}
	members := map[string]*member{}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, m := range members {
			_ = m.agent.Deregister(cctx, "handoff example finished")
			_ = m.agent.Close()
		}
	}()
	for _, role := range []string{"triage", "busy", "legacy", "expert"} {
		a, err := sdk.Dial(server, ids[role])
		if err != nil {
			return err
		}
		d := &registrypb.AgentDescriptor{Name: role, Description: "handoff example: " + role}
		if role != "triage" {
			d.Capabilities = []string{"billing"}
		}
		if err := a.Register(ctx, d); err != nil {
			_ = a.Close()
			return fmt.Errorf("register %s (is the server running? `make dev`): %w", ids[role], err)
		}
		members[role] = &member{name: ids[role], agent: a, client: handoff.New(a)}
		say(ids[role], "registered")
	}

	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	var wg sync.WaitGroup
	defer wg.Wait()
	watch := func(m *member, fn func(context.Context, handoff.Event)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.client.Watch(wctx, fn); err != nil {
				say(m.name, "stream ended: %v", err)
			}
		}()
	}
	watch(members["busy"], busy(members["busy"]))
	watch(members["legacy"], redirecting(members["legacy"], ids["expert"]))
	watch(members["expert"], expert(members["expert"]))
	events := make(chan handoff.Event, 16)
	watch(members["triage"], func(_ context.Context, e handoff.Event) { events <- e })
	for _, m := range members {
		// Opening the stream made each agent ready; a heartbeat says so at once, so that the
		// routing sees every specialist RUNNABLE.
		_ = m.agent.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
	}
	time.Sleep(time.Second)

	triage := members["triage"]
	ticket, _ := json.Marshal(Ticket{ID: ids["ticket"], Customer: "ACME Corp", Summary: "charged twice for the March invoice",
		Notes: "card ending 4242; customer wants a refund of the duplicate"})
	tk, err := triage.client.Request(ctx, handoff.Request{
		ID: ids["handoff"], Capabilities: []string{"billing"}, Reason: "billing dispute: needs a billing specialist",
		Context: ticket, Priority: 5, Timeout: time.Minute,
		Policy: &handoffpb.SwarmDelegationPolicy{MaxRetriesOnOverloaded: 1, InitialBackoffMs: 500, BackoffMultiplier: 2,
			MaxBackoffMs: 2000, AllowSpilloverRouting: true, MaxRedirects: 2},
	}, handoff.WithCorrelation(ids["ticket"]), handoff.WithContentType("application/json"))
	if err != nil {
		return err
	}
	say(triage.name, "requested handoff %s of %s to any agent with [billing]: %s", tk.RequestID, tk.Correlation, tk.State)

	deadline := time.After(wait)
	for done := false; !done; {
		select {
		case e := <-events:
			switch e.Kind {
			case handoff.EventAccepted:
				say(triage.name, "%s: accepted: %s", e.RequestID, e.Envelope.GetPayload())
			case handoff.EventCompleted:
				say(triage.name, "%s: completed; the ticket is no longer mine", e.RequestID)
				done = true
			default:
				say(triage.name, "%s: %s %s", e.RequestID, e.Kind, e.String("reason"))
				if strings.HasSuffix(e.Kind, "expired") || strings.HasSuffix(e.Kind, "rejected") {
					return fmt.Errorf("the handoff ended %s", e.Kind)
				}
			}
		case <-deadline:
			return fmt.Errorf("the handoff did not complete within %s (is a worker running? `make dev` runs one)", wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// §17.6: the originator MUST NOT continue work on the transferred context. The fence
	// reaches every frontend within about a second.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		_, err := triage.agent.Send(ctx, sdk.Message{To: ids["expert"], CorrelationID: ids["ticket"], Payload: []byte(`{"note":"one more thing"}`)})
		if sdk.CodeOf(err) == commonpb.ErrorCode_PERMISSION_DENIED {
			say(triage.name, "tried to keep working on %s: %v", ids["ticket"], err)
			break
		}
		if err != nil {
			return err
		}
		if time.Since(start) > 5*time.Second {
			return errors.New("triage was not fenced after the handoff completed")
		}
	}
	say("", "done: the ticket went from triage to %s; the offers it passed on the way are listed above", ids["expert"])
	return nil
}

// busy answers every offer OVERLOADED: the handoff is offered to it again after the backoff,
// then, its retries spent, to the next capable agent.
func busy(m *member) func(context.Context, handoff.Event) {
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		_, err := m.client.Reject(ctx, e.RequestID, handoff.Overloaded("queue full: 40 tickets waiting", 500*time.Millisecond))
		say(m.name, "offered %s from %s -> OVERLOADED (retry after 500ms) %v", e.RequestID, e.Offer.From, errOrEmpty(err))
	}
}

// redirecting sends every offer on to the agent that handles billing disputes now.
func redirecting(m *member, to string) func(context.Context, handoff.Event) {
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		_, err := m.client.Reject(ctx, e.RequestID, handoff.Redirect(to, "disputes moved to the expert desk"))
		say(m.name, "offered %s -> REDIRECT to %s %v", e.RequestID, to, errOrEmpty(err))
	}
}

// expert accepts, reads the ticket from the snapshot and completes the handoff.
func expert(m *member) func(context.Context, handoff.Event) {
	return func(ctx context.Context, e handoff.Event) {
		if e.Offer == nil {
			return
		}
		// The notification does not carry the snapshot; the pending request does, while the
		// handoff waits for an answer.
		var t Ticket
		if p, ok, err := m.client.Fetch(ctx, e.RequestID); err == nil && ok {
			_ = json.Unmarshal(p.Request.GetContextSnapshot(), &t)
		}
		if _, err := m.client.Accept(ctx, e.RequestID); err != nil {
			say(m.name, "accept %s failed: %v", e.RequestID, err)
			return
		}
		say(m.name, "offered %s (%s, %d bytes of %s) -> accepted", e.RequestID, e.Offer.Reason, e.Offer.ContextBytes, e.Offer.ContentType)
		if t.ID != "" {
			say(m.name, "working on %s for %s: %s", t.ID, t.Customer, t.Summary)
		}
		msg, err := m.client.Complete(ctx, e.RequestID)
		if err != nil {
			say(m.name, "complete %s failed: %v", e.RequestID, err)
			return
		}
		say(m.name, "completed: %s", msg)
	}
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}
