package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// agentStatus queries an agent's lifecycle workflow.
func agentStatus(t testing.TB, sys *system, agentID string) workflows.AgentStatus {
	t.Helper()
	v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.AgentWorkflowID(agentID), "", workflows.AgentStatusQuery)
	require.NoError(t, err)
	var st workflows.AgentStatus
	require.NoError(t, v.Get(&st))
	return st
}

// TestShutdownAgentGracePeriod covers §8.4 end to end on both stores: ShutdownAgent moves the
// agent to SHUTTING_DOWN (visible in the registry projection), an agent that deregisters
// within the grace period ends its lifecycle normally, and one that never does is marked
// FAILED with agent_shutdown_timeout when the grace period ends. Heartbeat state reports are
// applied only when the §8 table allows them.
func TestShutdownAgentGracePeriod(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			stubborn := dialAgent(t, sys, "stubborn")
			polite := dialAgent(t, sys, "polite")
			sc := schedulerpb.NewSchedulerServiceClient(stubborn.Conn())
			reg := registrypb.NewRegistryServiceClient(stubborn.Conn())
			for _, a := range []string{stubborn.ID(), polite.ID()} {
				_, err := reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a, State: commonpb.AgentState_RUNNABLE})
				require.NoError(t, err)
				waitState(t, sys, a, commonpb.AgentState_RUNNABLE)
			}

			// §8: a reported state is applied only along a legal edge.
			_, err := reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: stubborn.ID(), State: commonpb.AgentState_RUNNING})
			require.NoError(t, err)
			_, err = reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: stubborn.ID(), State: commonpb.AgentState_SCHEDULED})
			require.NoError(t, err)
			waitState(t, sys, stubborn.ID(), commonpb.AgentState_SCHEDULED)

			// Unknown agents are NotFound; a negative grace period is invalid.
			_, err = sc.ShutdownAgent(ctx, &schedulerpb.ShutdownAgentRequest{AgentId: uniq(t, "nobody")})
			require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
			_, err = sc.ShutdownAgent(ctx, &schedulerpb.ShutdownAgentRequest{AgentId: stubborn.ID(), GracePeriod: durationpb.New(-time.Second)})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

			asked := time.Now()
			for _, a := range []string{stubborn.ID(), polite.ID()} {
				res, err := sc.ShutdownAgent(ctx, &schedulerpb.ShutdownAgentRequest{AgentId: a, GracePeriod: durationpb.New(2 * time.Second)})
				require.NoError(t, err)
				require.True(t, res.GetOk())
			}
			waitState(t, sys, stubborn.ID(), commonpb.AgentState_SHUTTING_DOWN)
			projected := func(want commonpb.AgentState) func() bool {
				return func() bool {
					rec, err := sys.app.Store().Registry().GetAgent(ctx, stubborn.ID())
					return err == nil && rec.State == want
				}
			}
			require.Eventually(t, projected(commonpb.AgentState_SHUTTING_DOWN), 10*time.Second, 20*time.Millisecond,
				"the projection tells routing and scheduling that the agent is shutting down")

			// The polite agent deregisters within its grace period: its lifecycle ends normally.
			waitState(t, sys, polite.ID(), commonpb.AgentState_SHUTTING_DOWN)
			require.NoError(t, polite.Deregister(ctx, "shutting down"))
			var res workflows.AgentLifecycleResult
			require.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.AgentWorkflowID(polite.ID()), "").Get(ctx, &res))
			assert.Equal(t, workflows.AgentLifecycleResult{FinalState: "SHUTTING_DOWN", Reason: "shutting down"}, res)

			// The stubborn one never deregisters: FAILED with agent_shutdown_timeout (§8.4),
			// still registered (deregistration is explicit, §14).
			waitState(t, sys, stubborn.ID(), commonpb.AgentState_FAILED_STATE)
			st := agentStatus(t, sys, stubborn.ID())
			assert.Equal(t, "agent_shutdown_timeout", st.Reason)
			assert.GreaterOrEqual(t, st.Since.Sub(asked), 1500*time.Millisecond, "not before the grace period ends")
			require.Eventually(t, projected(commonpb.AgentState_FAILED_STATE), 10*time.Second, 20*time.Millisecond)
			require.NoError(t, stubborn.Deregister(ctx, "cleanup"))
		})
	}
}

// TestSchedulerHeartbeats (§14): the scheduler sends HEARTBEAT envelopes to a registered
// agent; one that never answers is marked unavailable after the debounce, is not
// deregistered, and is available again once it heartbeats.
func TestSchedulerHeartbeats(t *testing.T) {
	cfg := newConfig(t, "memory")
	cfg.HeartbeatInterval, cfg.HeartbeatMisses = 500*time.Millisecond, 2
	sys := start(t, cfg)
	ctx := context.Background()
	a := dialAgent(t, sys, "silent")
	in := openInbox(t, a)
	in.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageType() == commonpb.MessageType_HEARTBEAT })
	require.Eventually(t, func() bool { return !agentStatus(t, sys, a.ID()).Available }, 15*time.Second, 100*time.Millisecond,
		"two missed intervals mark the agent unavailable")
	_, err := sys.app.Store().Registry().GetAgent(ctx, a.ID())
	require.NoError(t, err, "missed heartbeats never deregister (§14)")
	require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))
	require.Eventually(t, func() bool { return agentStatus(t, sys, a.ID()).Available }, 15*time.Second, 100*time.Millisecond,
		"a heartbeat makes it available again")
}
