package test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// activityEntry reads a task's active activity entry from the store.
func activityEntry(t *testing.T, sys *system, agentID, taskID string) store.ActivityEntry {
	t.Helper()
	es, err := sys.app.Store().ActivityBuffer().List(context.Background(), store.ActivityFilter{AgentID: agentID, TaskID: taskID})
	require.NoError(t, err)
	require.Len(t, es, 1, "the task's activity entry")
	return es[0]
}

// TestAgentWaitsOnResponse covers 004 §1, §2 and §6 end to end on both stores, with an SDK
// agent serving a task: a request that requires a response moves the requester RUNNING →
// WAITING and records the request's message_id as its activity entry's waiting_on; the
// response moves it back to RUNNING and clears waiting_on; a request nobody answers keeps it
// WAITING until the request fails (ack_timeout after its attempts), then the task goes on
// with the NACK (the documented fallback) and completes.
func TestAgentWaitsOnResponse(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a := dialAgent(t, sys, "requester")
			b := dialAgent(t, sys, "responder")
			bIn := openInbox(t, b)
			taskID := uniq(t, "task")

			requests := make(chan string, 2)
			answered := make(chan string, 1)
			failed := make(chan string, 1)
			onMessage := func(_ context.Context, d *sdk.Delivery) {
				if id := d.InResponseTo(); id != "" {
					answered <- id
				}
				if p, ok := d.AckPayload(); ok && p.Stage == commonpb.AckStage_FAILED && p.ErrorCode == commonpb.ErrorCode_ACK_TIMEOUT {
					failed <- p.AckForMessageID
				}
			}
			handler := func(ctx context.Context, _ *sdk.TaskRun) ([]byte, error) {
				req, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"q":"status?"}`), ResponseTimeout: time.Minute})
				if err != nil {
					return nil, err
				}
				requests <- req.GetMessageId()
				select {
				case <-answered:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				// The answer reaches the agent before the lifecycle hears that the wait ended
				// (that news travels through the outbox): a second request sent at once may
				// begin while the first wait still counts, and the two waits merge into one
				// WAITING. The test is about two separate waits, so the task lets the
				// lifecycle catch up — as it would have, doing its work in between.
				if err := untilState(ctx, sys, a.ID(), commonpb.AgentState_RUNNING); err != nil {
					return nil, err
				}
				// Nobody answers this one: one attempt of 6 s, then FAILED ack_timeout. Long
				// enough that on a loaded 2-core machine the wait's beginning reaches the
				// lifecycle before its end does (at 2 s the end overtook it now and then, and
				// the lifecycle rightly never entered WAITING for it).
				req2, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"q":"anyone?"}`), ResponseTimeout: 6 * time.Second, MaxAttempts: 1})
				if err != nil {
					return nil, err
				}
				requests <- req2.GetMessageId()
				select {
				case <-failed:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return []byte("done without an answer"), nil
			}
			serveCtx, stop := context.WithCancel(ctx)
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = a.Serve(serveCtx, handler, &sdk.ServeOptions{OnMessage: onMessage, Logf: t.Logf})
			}()
			t.Cleanup(func() { stop(); <-served })
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)

			sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
			require.True(t, submit(t, sc, a.ID(), taskID, 0, "repo:app path:src/**").GetAccepted())
			var req string
			select {
			case req = <-requests:
			case <-time.After(30 * time.Second):
				t.Fatal("the task never sent its request")
			}
			waitState(t, sys, a.ID(), commonpb.AgentState_WAITING)
			e := activityEntry(t, sys, a.ID(), taskID)
			assert.Equal(t, req, e.WaitingOn, "004 §6: the entry records what the agent waits on")
			assert.False(t, e.WaitingSince.IsZero())
			assert.Equal(t, workflows.TaskRunning, waitTask(t, sys, taskID, workflows.TaskRunning).State, "WAITING keeps the task assigned")

			got := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == req })
			_, err := got.Respond(ctx, []byte(`{"a":"green"}`))
			require.NoError(t, err)

			var req2 string
			select {
			case req2 = <-requests:
			case <-time.After(30 * time.Second):
				t.Fatal("the task never got its answer")
			}
			// The second wait begins after the first ended: RUNNING came between them.
			waitState(t, sys, a.ID(), commonpb.AgentState_WAITING)
			assert.Equal(t, req2, activityEntry(t, sys, a.ID(), taskID).WaitingOn)
			st := waitTask(t, sys, taskID, workflows.TaskCompleted)
			assert.Equal(t, "done without an answer", st.Result)
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)

			want := []string{"RUNNABLE", "SCHEDULED", "RUNNING", "WAITING", "RUNNING", "WAITING", "RUNNING", "COMPLETED", "RUNNABLE"}
			assert.Eventually(t, func() bool { return slices.Equal(want, agentTransitions(t, sys, a.ID())) }, 10*time.Second, 50*time.Millisecond)
			assert.Equal(t, want, agentTransitions(t, sys, a.ID()),
				"the lifecycle entered WAITING for each request and left it when it was answered and when it failed")
			h, err := sys.app.Store().ActivityBuffer().History(ctx, store.ActivityFilter{AgentID: a.ID(), Limit: 1})
			require.NoError(t, err)
			require.Len(t, h, 1)
			assert.Empty(t, h[0].WaitingOn, "a finished task waits on nothing")

			if kind == "postgres" {
				stop()
				<-served
				require.NoError(t, a.Deregister(ctx, "test over"))
				require.Eventually(t, func() bool {
					d, err := sys.app.Temporal().DescribeWorkflowExecution(ctx, workflows.AgentWorkflowID(a.ID()), "")
					return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
				}, 15*time.Second, 100*time.Millisecond)
				recordHistory(t, sys.app.Temporal(), workflows.AgentWorkflowID(a.ID()), "agent_response_wait")
			}
		})
	}
}

// agentTransitions lists the states an agent's lifecycle entered after INITIALIZING, in
// order, from the audit log.
func agentTransitions(t *testing.T, sys *system, agentID string) []string {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{AgentID: agentID, TypePrefix: "agent.state", Limit: 1000})
	require.NoError(t, err)
	var out []string
	for _, ev := range evs {
		var d struct{ To string }
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		if d.To != "INITIALIZING" {
			out = append(out, d.To)
		}
	}
	return out
}

// untilState polls the agent's lifecycle until it is in state; unlike waitState it may run
// off the test's goroutine (it returns an error instead of failing the test).
func untilState(ctx context.Context, sys *system, agentID string, state commonpb.AgentState) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		v, err := sys.app.Temporal().QueryWorkflow(ctx, workflows.AgentWorkflowID(agentID), "", workflows.AgentStatusQuery)
		var st workflows.AgentStatus
		if err == nil && v.Get(&st) == nil && st.State == state.String() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s never reached %s: %w", agentID, state, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRefusedRequestLeavesNoWait (004 item 7): on both stores, a response-required request
// refused buffer_full is not waited on — its sender's lifecycle never enters WAITING, and no
// pending response is kept for it — so a task whose request was refused goes on at once.
func TestRefusedRequestLeavesNoWait(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a := dialAgent(t, sys, "requester")
			b := dialAgent(t, sys, "busy") // never reads: its buffer fills
			c := dialAgent(t, sys, "filler")
			for range sys.cfg.BufferCapacity {
				_, err := c.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"fill":1}`)})
				require.NoError(t, err)
			}
			taskID := uniq(t, "task")
			refused := make(chan error, 1)
			handler := func(ctx context.Context, _ *sdk.TaskRun) ([]byte, error) {
				_, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"q":"status?"}`), ResponseTimeout: time.Minute})
				refused <- err
				return []byte("went on without an answer"), nil
			}
			serveCtx, stop := context.WithCancel(ctx)
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = a.Serve(serveCtx, handler, &sdk.ServeOptions{Logf: t.Logf})
			}()
			t.Cleanup(func() { stop(); <-served })
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)

			sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
			require.True(t, submit(t, sc, a.ID(), taskID, 0, "repo:app path:src/**").GetAccepted())
			select {
			case err := <-refused:
				require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "%v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("the task never sent its request")
			}
			assert.Equal(t, "went on without an answer", waitTask(t, sys, taskID, workflows.TaskCompleted).Result)
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			want := []string{"RUNNABLE", "SCHEDULED", "RUNNING", "COMPLETED", "RUNNABLE"}
			assert.Eventually(t, func() bool { return slices.Equal(want, agentTransitions(t, sys, a.ID())) }, 10*time.Second, 50*time.Millisecond)
			assert.Equal(t, want, agentTransitions(t, sys, a.ID()), "the refused request never made the lifecycle wait")
			pending, err := sys.app.Store().Messages().PendingResponses(ctx, a.ID())
			require.NoError(t, err)
			assert.Empty(t, pending, "no response is awaited for a refused request")
		})
	}
}
