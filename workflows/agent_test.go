package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/observe"
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
	sink := observe.New(nil, st.Audit())
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
