package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// connOpts are the gRPC options of every client in the suite: plaintext, and a reconnect
// backoff capped at one second, as an agent that must ride out a server restart configures
// it (gRPC's default cap is two minutes).
func connOpts(extra ...grpc.DialOption) []grpc.DialOption {
	return append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, extra...)
}

// frontends returns a dial target and option that spread calls over every address by round
// robin and skip the dead ones — how an agent reaches a set of stateless frontends behind
// one name.
func frontends(addrs ...string) (string, grpc.DialOption) {
	r := manual.NewBuilderWithScheme("sw4rm-faults-" + uuid.NewString()[:8])
	var st resolver.State
	for _, a := range addrs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(st)
	return r.Scheme() + ":///frontends", grpc.WithResolvers(r)
}

// dialAgent connects an agent to target; the connection closes when the test ends.
func dialAgent(t testing.TB, target, id string, extra ...grpc.DialOption) *sdk.Agent {
	t.Helper()
	opts := connOpts(append([]grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}, extra...)...)
	a, err := sdk.Dial(target, id, opts...)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", target, id, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// register registers the agent (retrying while the system starts) and reports it ready with
// a heartbeat, so that a producer that never opens a stream does not run into its init
// timeout.
func register(t testing.TB, a *sdk.Agent, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	err := waitCtx(ctx, 200*time.Millisecond, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		last = a.Register(cctx, &registrypb.AgentDescriptor{Name: name, Description: "fault suite agent " + name,
			ModalitiesSupported: []string{"application/json"}})
		if last == nil {
			last = a.Heartbeat(cctx, commonpb.AgentState_RUNNABLE, map[string]string{"ok": "yes"})
		}
		return last == nil
	})
	if err != nil {
		t.Fatalf("register %s: %v", a.ID(), last)
	}
}

// agentID is a readable, unique agent id.
func agentID(name string) string { return name + "-" + uuid.NewString()[:6] }

// rejectedCode returns the error_code of a protocol rejection, or false for a transport or
// server error.
func rejectedCode(err error) (commonpb.ErrorCode, bool) {
	var re *sdk.RejectedError
	if errors.As(err, &re) {
		return re.Code, true
	}
	return 0, false
}

// figures are a scenario's results, printed in one line and asserted.
type figures struct {
	scenario      string
	accepted      int // messages and tasks the system accepted
	lost          int // accepted messages never delivered to their recipient
	duplicated    int // messages handled twice, tasks run twice
	strandedTasks int // accepted tasks that never completed
	hitlLost      int // HITL callers that did not get their decision
	extra         []string
	problems      []string // anything else that fails the scenario
}

// add appends key=value details to the figures line.
func (f *figures) add(format string, args ...any) {
	f.extra = append(f.extra, fmt.Sprintf(format, args...))
}

// problem records something that fails the scenario besides the five figures.
func (f *figures) problem(format string, args ...any) {
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

// line is the figures line the CI log shows.
func (f figures) line() string {
	s := fmt.Sprintf("fault figures: scenario=%s accepted=%d lost=%d duplicated=%d stranded_tasks=%d hitl_lost=%d",
		f.scenario, f.accepted, f.lost, f.duplicated, f.strandedTasks, f.hitlLost)
	if len(f.extra) > 0 {
		s += " " + strings.Join(f.extra, " ")
	}
	return s
}

// report prints the figures (to stdout, so `go test -v` shows them in CI) and fails the test
// for any loss, duplicate, stranded task or lost HITL decision.
func (f figures) report(t testing.TB) {
	t.Helper()
	fmt.Println(f.line())
	if f.accepted == 0 {
		t.Errorf("%s: nothing was accepted, so the scenario proved nothing", f.scenario)
	}
	if f.lost != 0 {
		t.Errorf("%s: %d accepted messages were lost", f.scenario, f.lost)
	}
	if f.duplicated != 0 {
		t.Errorf("%s: %d messages or tasks were handled twice", f.scenario, f.duplicated)
	}
	if f.strandedTasks != 0 {
		t.Errorf("%s: %d tasks are stranded", f.scenario, f.strandedTasks)
	}
	if f.hitlLost != 0 {
		t.Errorf("%s: %d HITL callers lost their decision", f.scenario, f.hitlLost)
	}
	for _, p := range f.problems {
		t.Errorf("%s: %s", f.scenario, p)
	}
}
