package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/worker"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// newEnv returns a time-skipping workflow environment with the real activities over a
// memory store in which agents "subject" and "peer" are registered.
func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, store.Store) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	st := memory.New()
	t.Cleanup(st.Close)
	for _, id := range []string{"subject", "peer"} {
		require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id}, State: commonpb.AgentState_INITIALIZING,
		}))
	}
	sink := audit.New(nil, st.Audit())
	worker.Register(env, &activities.Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink})
	return env, st
}

func status(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.AgentStatus {
	t.Helper()
	v, err := env.QueryWorkflow(workflows.AgentStatusQuery)
	require.NoError(t, err)
	var s workflows.AgentStatus
	require.NoError(t, v.Get(&s))
	return s
}

// peerNotifications returns the registry events delivered to "peer".
func peerNotifications(t *testing.T, st store.Store) []string {
	t.Helper()
	ds, err := st.Messages().Claim(context.Background(), store.ClaimRequest{AgentID: "peer", Limit: 100, Lease: time.Hour})
	require.NoError(t, err)
	var events []string
	for _, d := range ds {
		require.Equal(t, commonpb.MessageType_NOTIFICATION, d.Envelope.GetMessageType())
		events = append(events, string(d.Envelope.GetPayload()))
	}
	return events
}

func TestAgentBecomesRunnableWhenReadyAndEndsOnDeregistration(t *testing.T) {
	env, st := newEnv(t)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "INITIALIZING", status(t, env).State)
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "RUNNABLE", s.State)
		require.Equal(t, "ready via stream", s.Reason)
		rec, err := st.Registry().GetAgent(context.Background(), "subject")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_RUNNABLE, rec.State, "the registry projection follows the workflow")
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "bye"})
	}, 2*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.AgentLifecycleResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, workflows.AgentLifecycleResult{FinalState: "RUNNABLE", Reason: "bye"}, res)

	events := peerNotifications(t, st)
	require.Len(t, events, 2, "join then leave")
	require.Contains(t, events[0], `"event":"agent_joined"`)
	require.Contains(t, events[1], `"event":"agent_left"`)
	require.Contains(t, events[1], `"reason":"bye"`)
}

func TestAgentInitTimeoutFailsThenReRegistrationRecovers(t *testing.T) {
	env, st := newEnv(t)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "INITIALIZING", status(t, env).State, "59 s in, still within §8.3's 60 s")
	}, 59*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "FAILED_STATE", s.State)
		require.Equal(t, "init_timeout", s.Reason)
		// A late readiness signal does not revive a failed agent: FAILED → RUNNABLE is illegal.
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "heartbeat"})
	}, 61*time.Second)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "FAILED_STATE", status(t, env).State)
		env.SignalWorkflow(workflows.AgentRegisterSignal, workflows.AgentRegistration{Name: "subject v2"})
	}, 62*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "RUNNABLE", s.State)
		require.Equal(t, "recovered by re-registration", s.Reason)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	}, 63*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	// Every transition is in the audit log, the timeout with its error code (§8.3).
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{AgentID: "subject", TypePrefix: "agent.state"})
	require.NoError(t, err)
	var seen []string
	for _, e := range evs {
		seen = append(seen, string(e.Details))
	}
	require.Len(t, seen, 4)
	require.Contains(t, seen[1], `"reason":"init_timeout"`)
	require.Contains(t, seen[1], `"to":"FAILED_STATE"`)
	require.Contains(t, seen[2], `"to":"RECOVERING"`)
	require.Contains(t, seen[3], `"to":"RUNNABLE"`)
}

func TestAgentInitTimeoutIsConfigurable(t *testing.T) {
	env, _ := newEnv(t)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "FAILED_STATE", status(t, env).State)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{})
	}, 6*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", InitTimeout: 5 * time.Second})
	require.True(t, env.IsWorkflowCompleted())
	var res workflows.AgentLifecycleResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, "FAILED_STATE", res.FinalState)
}

func TestReadyAfterRunnableIsANoOp(t *testing.T) {
	env, st := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "heartbeat"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "ready via stream", status(t, env).Reason)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{})
	}, 2*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject"})
	require.NoError(t, env.GetWorkflowError())
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{AgentID: "subject", TypePrefix: "agent.state"})
	require.NoError(t, err)
	require.Len(t, evs, 2, "INITIALIZING and RUNNABLE only")
}

// report signals a state the agent reported in a heartbeat.
func report(env *testsuite.TestWorkflowEnvironment, states ...commonpb.AgentState) {
	for _, s := range states {
		env.SignalWorkflow(workflows.AgentStateReportSignal, workflows.AgentStateReport{State: s, Via: "heartbeat"})
	}
}

// stateAudit returns the details of the agent.state audit events of "subject".
func stateAudit(t *testing.T, st store.Store) []string {
	t.Helper()
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{AgentID: "subject", TypePrefix: "agent.state"})
	require.NoError(t, err)
	var seen []string
	for _, e := range evs {
		seen = append(seen, string(e.Details))
	}
	return seen
}

// TestStateTimeouts drives the agent into each timed state of §8.3 by state reports and
// checks it stays there until the timeout, then fails with the state's error code, which is
// recorded in the registry projection and the audit log.
func TestStateTimeouts(t *testing.T) {
	const (
		running   = commonpb.AgentState_RUNNING
		scheduled = commonpb.AgentState_SCHEDULED
	)
	for _, tc := range []struct {
		name    string
		in      workflows.AgentLifecycleInput
		path    []commonpb.AgentState // reported after readiness
		state   commonpb.AgentState
		timeout time.Duration
		code    string
	}{
		{"waiting_resources default", workflows.AgentLifecycleInput{}, []commonpb.AgentState{scheduled, running, commonpb.AgentState_WAITING_RESOURCES},
			commonpb.AgentState_WAITING_RESOURCES, 300 * time.Second, "resource_timeout"},
		{"waiting_resources configured", workflows.AgentLifecycleInput{ResourceTimeout: 20 * time.Second}, []commonpb.AgentState{scheduled, running, commonpb.AgentState_WAITING_RESOURCES},
			commonpb.AgentState_WAITING_RESOURCES, 20 * time.Second, "resource_timeout"},
		{"suspended default", workflows.AgentLifecycleInput{HeartbeatInterval: time.Hour}, []commonpb.AgentState{scheduled, running, commonpb.AgentState_SUSPENDED},
			commonpb.AgentState_SUSPENDED, 3600 * time.Second, "suspend_timeout"},
		{"suspended configured", workflows.AgentLifecycleInput{SuspendTimeout: 10 * time.Second}, []commonpb.AgentState{scheduled, running, commonpb.AgentState_SUSPENDED},
			commonpb.AgentState_SUSPENDED, 10 * time.Second, "suspend_timeout"},
		{"recovering default", workflows.AgentLifecycleInput{}, []commonpb.AgentState{commonpb.AgentState_FAILED_STATE, commonpb.AgentState_RECOVERING},
			commonpb.AgentState_RECOVERING, 120 * time.Second, "recovery_timeout"},
		{"recovering configured", workflows.AgentLifecycleInput{RecoveryTimeout: 7 * time.Second}, []commonpb.AgentState{commonpb.AgentState_FAILED_STATE, commonpb.AgentState_RECOVERING},
			commonpb.AgentState_RECOVERING, 7 * time.Second, "recovery_timeout"},
		{"shutting_down reported by the agent, default grace", workflows.AgentLifecycleInput{}, []commonpb.AgentState{commonpb.AgentState_SHUTTING_DOWN},
			commonpb.AgentState_SHUTTING_DOWN, 30 * time.Second, "agent_shutdown_timeout"},
		{"shutting_down configured grace", workflows.AgentLifecycleInput{ShutdownGrace: 4 * time.Second}, []commonpb.AgentState{commonpb.AgentState_SHUTTING_DOWN},
			commonpb.AgentState_SHUTTING_DOWN, 4 * time.Second, "agent_shutdown_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, st := newEnv(t)
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
			}, time.Second)
			env.RegisterDelayedCallback(func() { report(env, tc.path...) }, 2*time.Second)
			env.RegisterDelayedCallback(func() {
				s := status(t, env)
				require.Equal(t, tc.state.String(), s.State, "just before the timeout")
				rec, err := st.Registry().GetAgent(context.Background(), "subject")
				require.NoError(t, err)
				require.Equal(t, tc.state, rec.State)
			}, 2*time.Second+tc.timeout-time.Second)
			env.RegisterDelayedCallback(func() {
				s := status(t, env)
				require.Equal(t, "FAILED_STATE", s.State)
				require.Equal(t, tc.code, s.Reason)
				rec, err := st.Registry().GetAgent(context.Background(), "subject")
				require.NoError(t, err)
				require.Equal(t, commonpb.AgentState_FAILED_STATE, rec.State)
				env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
			}, 2*time.Second+tc.timeout+time.Second)
			in := tc.in
			in.AgentID, in.Name = "subject", "subject"
			if in.HeartbeatInterval == 0 {
				// The agent never heartbeats here: the §14 debounce would fail it first.
				in.HeartbeatInterval = time.Hour
			}
			env.ExecuteWorkflow(workflows.AgentLifecycle, in)
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var res workflows.AgentLifecycleResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, "FAILED_STATE", res.FinalState)

			seen := stateAudit(t, st)
			last := seen[len(seen)-1]
			require.Contains(t, last, `"reason":"`+tc.code+`"`)
			require.Contains(t, last, `"from":"`+tc.state.String()+`"`)
			require.Contains(t, last, `"to":"FAILED_STATE"`)
		})
	}
}

// TestStateTimerRearmsOnReentry: leaving a timed state stops its timer, and entering it again
// starts a fresh one.
func TestStateTimerRearmsOnReentry(t *testing.T) {
	env, _ := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
		report(env, commonpb.AgentState_SCHEDULED, commonpb.AgentState_RUNNING, commonpb.AgentState_SUSPENDED)
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		report(env, commonpb.AgentState_RESUMED, commonpb.AgentState_RUNNING, commonpb.AgentState_SUSPENDED)
	}, 8*time.Second) // re-entered at 8 s: the first timer (due at 11 s) must not fire
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "SUSPENDED", status(t, env).State)
	}, 17*time.Second)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "suspend_timeout", status(t, env).Reason)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{})
	}, 19*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", SuspendTimeout: 10 * time.Second})
	require.NoError(t, env.GetWorkflowError())
}

// TestIllegalStateReportsRefused: a reported state the §8 table does not allow from the
// current one is refused and never applied or recorded.
func TestIllegalStateReportsRefused(t *testing.T) {
	env, st := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		// RUNNABLE → RUNNING skips SCHEDULED; RUNNABLE → RESUMED, → COMPLETED and → RECOVERING
		// are not edges either.
		report(env, commonpb.AgentState_RUNNING, commonpb.AgentState_RESUMED, commonpb.AgentState_COMPLETED, commonpb.AgentState_RECOVERING)
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "RUNNABLE", s.State)
		require.Equal(t, "ready via stream", s.Reason)
		rec, err := st.Registry().GetAgent(context.Background(), "subject")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_RUNNABLE, rec.State)
		report(env, commonpb.AgentState_SCHEDULED) // legal
	}, 3*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "SCHEDULED", s.State)
		require.Equal(t, "reported via heartbeat", s.Reason)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{})
	}, 4*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject"})
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, stateAudit(t, st), 3, "INITIALIZING, RUNNABLE, SCHEDULED: no refused report is recorded")
}

func TestShutdownWithinGraceEndsNormally(t *testing.T) {
	env, st := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentShutdownSignal, workflows.AgentShutdown{GracePeriod: 10 * time.Second, Reason: "maintenance"})
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "SHUTTING_DOWN", s.State)
		require.Equal(t, "shutdown requested: maintenance", s.Reason)
		rec, err := st.Registry().GetAgent(context.Background(), "subject")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_SHUTTING_DOWN, rec.State, "the router and scheduler see the shutdown")
		// A second request does not restart the grace period: SHUTTING_DOWN → SHUTTING_DOWN is no edge.
		env.SignalWorkflow(workflows.AgentShutdownSignal, workflows.AgentShutdown{GracePeriod: time.Hour})
	}, 3*time.Second)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "SHUTTING_DOWN", status(t, env).State)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "shut down"})
	}, 11*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.AgentLifecycleResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, workflows.AgentLifecycleResult{FinalState: "SHUTTING_DOWN", Reason: "shut down"}, res)
	for _, d := range stateAudit(t, st) {
		require.NotContains(t, d, "agent_shutdown_timeout")
	}
}

func TestShutdownPastGraceFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		want  time.Duration
	}{{"explicit grace", 10 * time.Second, 10 * time.Second}, {"zero grace is the 30 s default", 0, 30 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			env, st := newEnv(t)
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(workflows.AgentShutdownSignal, workflows.AgentShutdown{GracePeriod: tc.grace})
			}, time.Second) // from INITIALIZING: legal, and the init timer stops
			env.RegisterDelayedCallback(func() {
				require.Equal(t, "SHUTTING_DOWN", status(t, env).State)
			}, tc.want)
			env.RegisterDelayedCallback(func() {
				s := status(t, env)
				require.Equal(t, "FAILED_STATE", s.State)
				require.Equal(t, "agent_shutdown_timeout", s.Reason)
				env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "late"})
			}, tc.want+2*time.Second)
			env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject"})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var res workflows.AgentLifecycleResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, "FAILED_STATE", res.FinalState)
			seen := stateAudit(t, st)
			require.Len(t, seen, 3, "INITIALIZING, SHUTTING_DOWN, FAILED")
			require.Contains(t, seen[2], `"reason":"agent_shutdown_timeout"`)
			require.Contains(t, seen[2], `"from":"SHUTTING_DOWN"`)
		})
	}
}

// TestHeartbeatDebounce: the lifecycle heartbeats the agent every interval; after three
// consecutive intervals without a heartbeat from it, it is marked unavailable and FAILED with
// agent_unavailable (but stays registered), and available again, recovered to RUNNABLE, once
// it heartbeats.
func TestHeartbeatDebounce(t *testing.T) {
	env, st := newEnv(t)
	ctx := context.Background()
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.True(t, s.Available, "two misses are within the debounce")
		require.Equal(t, 2, s.MissedHeartbeats)
	}, 25*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.False(t, s.Available, "the third miss marks it unavailable")
		require.Equal(t, "FAILED_STATE", s.State, "and fails it")
		require.Equal(t, "agent_unavailable: no heartbeat in 3 consecutive intervals of 10s (§14)", s.Reason)
		_, err := st.Registry().GetAgent(ctx, "subject")
		require.NoError(t, err, "and never deregister (§14)")
		require.NoError(t, st.Registry().RecordHeartbeat(ctx, "subject", nil, time.Now()))
	}, 35*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.True(t, s.Available, "heartbeats resumed")
		require.Equal(t, 0, s.MissedHeartbeats)
		require.Equal(t, "RUNNABLE", s.State)
		require.Equal(t, "recovered: heartbeats resumed", s.Reason)
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{})
	}, 45*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", HeartbeatInterval: 10 * time.Second})
	require.NoError(t, env.GetWorkflowError())

	unavailable, err := st.Audit().List(ctx, store.AuditFilter{AgentID: "subject", TypePrefix: "agent.unavailable"})
	require.NoError(t, err)
	require.Len(t, unavailable, 1)
	available, err := st.Audit().List(ctx, store.AuditFilter{AgentID: "subject", TypePrefix: "agent.available"})
	require.NoError(t, err)
	require.Len(t, available, 1)

	ds, err := st.Messages().Claim(ctx, store.ClaimRequest{AgentID: "subject", Limit: 100, Lease: time.Hour})
	require.NoError(t, err)
	heartbeats := 0
	for _, d := range ds {
		if d.Envelope.GetMessageType() == commonpb.MessageType_HEARTBEAT {
			heartbeats++
		}
	}
	require.Equal(t, 4, heartbeats, "one HEARTBEAT request per interval")
}
