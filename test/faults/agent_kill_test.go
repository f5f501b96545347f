package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/repos"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// The environment of a bound agent process (runBoundAgent): the test binary started with
// boundAgentAddrEnv set is that agent, not the suite.
const (
	// boundAgentAddrEnv is the frontend the agent dials.
	boundAgentAddrEnv = "SW4RM_FAULTS_BOUND_AGENT_ADDR"
	// boundAgentIDEnv is the agent's id.
	boundAgentIDEnv = "SW4RM_FAULTS_BOUND_AGENT_ID"
)

// runBoundAgent is an agent as a process of its own: it registers, answers the scheduler's
// heartbeats (§14) as a live agent's runtime does, binds its home worktree in repository
// "app" and works there until it is killed. Each step is a line on stdout, which the suite
// reads from the process's log. It returns the exit code.
func runBoundAgent() int {
	addr, id := os.Getenv(boundAgentAddrEnv), os.Getenv(boundAgentIDEnv)
	fail := func(format string, args ...any) int {
		fmt.Printf("agent failed: "+format+"\n", args...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := dialRegistered(ctx, addr, id, &registrypb.AgentDescriptor{Name: "binder", Description: "fault suite agent bound to a worktree",
		ModalitiesSupported: []string{"application/json"}}, false)
	if err != nil {
		return fail("register: %v", err)
	}
	defer func() { _ = a.Close() }()
	go func() {
		for ctx.Err() == nil {
			_ = a.Heartbeat(ctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	fmt.Printf("registered agent=%s\n", id)
	st, err := wtsdk.New(a).Bind(ctx, "app", "home-"+id)
	if err != nil {
		return fail("bind: %v", err)
	}
	fmt.Printf("bound path=%s\n", st.Path)
	<-ctx.Done()
	return fail("still bound: nobody killed the agent")
}

// startBoundAgent starts runBoundAgent from the suite's own test binary.
func startBoundAgent(t *testing.T, dir, addr, id string) *proc {
	t.Helper()
	return startAgentProc(t, dir, id, cleanEnv(boundAgentAddrEnv+"="+addr, boundAgentIDEnv+"="+id))
}

// TestAgentKilledWhileBound (§8.4, §14, §16): one `sw4rm server` and one `sw4rm worker` on
// PostgreSQL, Temporal and a git repository, heartbeating agents every second with a debounce
// of two intervals. An agent running as a process of its own binds its home worktree — git
// locks it for the agent — and is killed with SIGKILL, never deregistering. Its heartbeats
// stop, the debounce fails it (FAILED agent_unavailable), and its end releases the binding:
// UNBOUND, the git lock released, audited as agent.cleanup.worktree; the agent stays
// registered (§14: deregistration is explicit). Before, the lock stayed for good and no
// other agent could bind the worktree.
func TestAgentKilledWhileBound(t *testing.T) {
	repo := faultRepo(t)
	dir := t.TempDir()
	d := startDeployment(t, dir, 1, "SW4RM_REPOS=app="+repo, "SW4RM_HEARTBEAT_INTERVAL=1s", "SW4RM_HEARTBEAT_MISSES=2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	id := agentID("binder")
	p := startBoundAgent(t, dir, d.server.addr, id)
	marker := "---- agent-" + id + " start"
	if err := waitFor(time.Minute, 50*time.Millisecond, func() bool { return logContains(p.log, marker, "bound path=") }); err != nil {
		t.Fatalf("%s never bound its worktree:\n%s", id, tail(p.log, 20))
	}
	path := ""
	for line := range strings.SplitSeq(tail(p.log, 20), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "bound path="); ok {
			path = v
		}
	}
	if reason, locked := worktreeLock(t, repo, path); !locked || reason != repos.LockReason(id) {
		t.Fatalf("the bound worktree %s is not locked for %s (%q, %v)", path, id, reason, locked)
	}
	p.kill()
	killedAt := time.Now()

	f := figures{scenario: "agent-kill-bound", accepted: 1}
	observer := dialAgent(t, d.server.addr, agentID("observer"))
	register(t, observer, "observer")
	op := wtsdk.NewOperator(observer.Conn())
	// Two missed 1 s intervals fail it; a minute is a generous bound.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	st, err := op.WaitState(wctx, id, 200*time.Millisecond, func(s wtsdk.Status) bool { return s.State == wtsdk.StateUnbound })
	wcancel()
	releasedAt := time.Now()
	if err != nil {
		f.problem("the killed agent's binding did not end: %v (last %+v)", err, st)
	}
	if reason, locked := worktreeLock(t, repo, path); locked {
		f.problem("the killed agent's worktree is still locked (%q)", reason)
	}
	var life workflows.AgentStatus
	if v, err := d.ts.client.QueryWorkflow(ctx, workflows.AgentWorkflowID(id), "", workflows.AgentStatusQuery); err != nil || v.Get(&life) != nil {
		f.problem("the killed agent's lifecycle cannot be queried: %v", err)
	} else if life.State != commonpb.AgentState_FAILED_STATE.String() || !strings.HasPrefix(life.Reason, workflows.ReasonHeartbeatLoss) {
		f.problem("the killed agent is %s (%q), not FAILED %s", life.State, life.Reason, workflows.ReasonHeartbeatLoss)
	}
	if n, err := cleanupRows(d.cfg.database, id, "agent.cleanup.worktree", 30*time.Second); err != nil || n != 1 {
		f.problem("the release is audited %d times, not once (%v)", n, err)
	}

	// Another agent may now take the worktree the killed one held.
	other := dialAgent(t, d.server.addr, agentID("heir"))
	register(t, other, "heir")
	if _, err := wtsdk.New(other).Bind(ctx, "app", "home-"+id); err != nil {
		f.problem("another agent cannot bind the released worktree: %v", err)
	}
	f.add("released_after_s=%.1f", releasedAt.Sub(killedAt).Seconds())
	f.report(t)
}

// cleanupRows counts an agent's audit rows of type typ, as an operator would with psql,
// waiting up to timeout for at least one (the rows are written behind).
func cleanupRows(url, agentID, typ string, timeout time.Duration) (int, error) {
	n, last := 0, error(nil)
	_ = waitFor(timeout, 200*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			last = err
			return false
		}
		defer conn.Close(context.Background())
		last = conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE agent_id = $1 AND type = $2`, agentID, typ).Scan(&n)
		return last == nil && n > 0
	})
	return n, last
}
