package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// unreachable answers every call as a Temporal that cannot be reached.
func unreachable(string) *status.Status {
	return status.New(codes.Unavailable, "connection refused (Temporal is unreachable)")
}

// startAllBehindProxy starts sw4rm (server and worker) whose only way to Temporal is a
// proxy the test can cut, and a Temporal client of the test's own that reaches the dev
// server directly (to watch the workflows while sw4rm cannot).
func startAllBehindProxy(t *testing.T, kind string) (*system, *temporalProxy, client.Client) {
	t.Helper()
	proxy := newTemporalProxy(t)
	cfg := newConfig(t, kind)
	cfg.TemporalAddress = proxy.addr
	sys := start(t, cfg)
	direct, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: "default", Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	return sys, proxy, direct
}

// directTaskState queries a task's state through c.
func directTaskState(c client.Client, taskID string) (workflows.TaskStatus, error) {
	v, err := c.QueryWorkflow(context.Background(), workflows.TaskWorkflowID(taskID), "", workflows.TaskStatusQuery)
	if err != nil {
		return workflows.TaskStatus{}, err
	}
	var st workflows.TaskStatus
	return st, v.Get(&st)
}

func waitDirectTask(t *testing.T, c client.Client, taskID, state string, within time.Duration) workflows.TaskStatus {
	t.Helper()
	var (
		st      workflows.TaskStatus
		lastErr error
	)
	// The message is built after the wait, so that it shows the last state seen.
	ok := assert.Eventually(t, func() bool {
		s, err := directTaskState(c, taskID)
		st, lastErr = s, err
		return err == nil && s.State == state
	}, within, 50*time.Millisecond)
	require.True(t, ok, "task %s never reached %s (last %+v, error %v)", taskID, state, st, lastErr)
	return st
}

// TestTaskFinishedDuringTemporalOutageCompletes is issue 13's first defect: an agent's ACK
// FULFILLED that reaches the store while Temporal is unreachable must still complete the
// task once Temporal is back, the agent must be told the truth (the ACK was taken), and the
// agent's next task must run. Before the outbox, the ACK was stored, the signal to the
// lifecycle failed, the agent was told Unavailable, its retry was ignored as a repeat, and
// the task stayed RUNNING forever with every later task QUEUED behind it.
func TestTaskFinishedDuringTemporalOutageCompletes(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, proxy, direct := startAllBehindProxy(t, kind)
			b := dialAgent(t, sys, "b")
			sc := schedulerpb.NewSchedulerServiceClient(b.Conn())
			first, second := uniq(t, "first"), uniq(t, "second")
			release := make(chan struct{})
			var (
				ackErrsMu sync.Mutex
				ackErrs   []string
			)
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = b.Serve(ctx, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
					if run.Task().ID == first {
						select {
						case <-release:
						case <-ctx.Done():
							return nil, ctx.Err()
						}
					}
					return []byte("done " + run.Task().ID), nil
				}, &sdk.ServeOptions{Logf: func(format string, args ...any) {
					ackErrsMu.Lock()
					defer ackErrsMu.Unlock()
					ackErrs = append(ackErrs, format)
				}})
			}()
			t.Cleanup(func() { cancel(); <-served })
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)
			require.True(t, submit(t, sc, b.ID(), first, 0, "repo:app path:src/first/**").GetAccepted())
			waitDirectTask(t, direct, first, workflows.TaskRunning, 30*time.Second)

			proxy.cut(unreachable) // Temporal becomes unreachable for sw4rm (server and worker alike)
			close(release)
			// The agent's ACK FULFILLED reaches the store while Temporal is away.
			require.Eventually(t, func() bool {
				evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{AgentID: b.ID(), TypePrefix: "message.state"})
				for _, e := range evs {
					if err == nil && e.Actor == b.ID() && strings.Contains(string(e.Details), "ENVELOPE_STATE_FULFILLED") {
						return true
					}
				}
				return false
			}, 30*time.Second, 50*time.Millisecond, "the ACK FULFILLED never reached the store")
			// Stay cut past the Temporal client's 10 s RPC timeout: a signal sent while the ACK
			// is handled then fails for good, and only a durable outbox entry can deliver it.
			time.Sleep(12 * time.Second)
			proxy.restore()

			done := waitDirectTask(t, direct, first, workflows.TaskCompleted, 60*time.Second)
			require.Equal(t, "done "+first, done.Result)
			require.True(t, submit(t, sc, b.ID(), second, 0, "repo:app path:src/second/**").GetAccepted())
			waitDirectTask(t, direct, second, workflows.TaskCompleted, 60*time.Second)
			ackErrsMu.Lock()
			defer ackErrsMu.Unlock()
			require.Empty(t, ackErrs, "the agent is told its ACK was taken, not that it failed")
		})
	}
}

// TestRegisterDuringTemporalOutage is issue 13's sixth defect: a registration taken while
// Temporal is unreachable is answered truthfully (registered; the lifecycle starts later),
// and once Temporal is back the agent has its lifecycle workflow and becomes RUNNABLE —
// never an agent in the registry with no lifecycle.
func TestRegisterDuringTemporalOutage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, proxy, direct := startAllBehindProxy(t, kind)
			proxy.cut(unreachable)
			a, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, "late"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })
			rc := registrypb.NewRegistryServiceClient(a.Conn())
			res, err := rc.RegisterAgent(context.Background(), &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{
				AgentId: a.ID(), Name: "late", Description: "registers while Temporal is away", Capabilities: []string{"test"},
				CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json"},
			}})
			require.NoError(t, err, "the registration is stored; the lifecycle's start is a durable handoff")
			require.True(t, res.GetAccepted())
			require.Contains(t, res.GetReason(), "starts as soon as Temporal is reachable")
			pending, err := sys.app.Store().Outbox().Pending(context.Background(), 10)
			require.NoError(t, err)
			require.Len(t, pending, 1)
			require.Equal(t, workflows.OutboxAgentRegister, pending[0].Kind)

			proxy.restore()
			require.Eventually(t, func() bool {
				_, err := direct.DescribeWorkflowExecution(context.Background(), workflows.AgentWorkflowID(a.ID()), "")
				return err == nil
			}, 60*time.Second, 100*time.Millisecond, "the relay never started the lifecycle")
			require.Eventually(t, func() bool {
				if err := a.Heartbeat(context.Background(), commonpb.AgentState_RUNNABLE, nil); err != nil {
					return false
				}
				v, err := direct.QueryWorkflow(context.Background(), workflows.AgentWorkflowID(a.ID()), "", workflows.AgentStatusQuery)
				var st workflows.AgentStatus
				return err == nil && v.Get(&st) == nil && st.State == commonpb.AgentState_RUNNABLE.String()
			}, 30*time.Second, 200*time.Millisecond)
			require.Eventually(t, func() bool {
				hs, err := sys.app.Store().Outbox().Pending(context.Background(), 10)
				return err == nil && len(hs) == 0
			}, 10*time.Second, 50*time.Millisecond, "a delivered handoff is removed")
		})
	}
}

// TestDeregisterDuringTemporalOutage: a deregistration taken while Temporal is unreachable
// removes the agent from routing at once, is answered ok, and ends the lifecycle workflow
// once Temporal is back — never a lifecycle left running for an agent nobody can reach.
func TestDeregisterDuringTemporalOutage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, proxy, direct := startAllBehindProxy(t, kind)
			a := dialAgent(t, sys, "leaving")
			require.NoError(t, a.Heartbeat(context.Background(), commonpb.AgentState_RUNNABLE, nil))
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			proxy.cut(unreachable)
			res, err := registrypb.NewRegistryServiceClient(a.Conn()).DeregisterAgent(context.Background(),
				&registrypb.DeregisterAgentRequest{AgentId: a.ID(), Reason: "done for the day"})
			require.NoError(t, err)
			require.True(t, res.GetOk())
			_, err = sys.app.Store().Registry().GetAgent(context.Background(), a.ID())
			require.ErrorIs(t, err, store.ErrNotFound, "out of routing at once")
			proxy.restore()
			require.Eventually(t, func() bool {
				d, err := direct.DescribeWorkflowExecution(context.Background(), workflows.AgentWorkflowID(a.ID()), "")
				return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
			}, 60*time.Second, 100*time.Millisecond, "the lifecycle never ended")
		})
	}
}
