package test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestMaxParallelInstancesHoldsThenAdmits covers §9.1 end to end on both stores with
// SW4RM_MAX_PARALLEL "coder=1": while one coder runs a task, a task for a second coder is
// accepted with the feedback that it is queued by max_parallel_instances, is held (never
// dispatched) for longer than its re-check period, and is admitted and runs once the first
// task completes and frees the slot. Another agent type is not held.
func TestMaxParallelInstancesHoldsThenAdmits(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.MaxParallel = "coder=1"
			sys := start(t, cfg)
			c1, c2 := dialAgent(t, sys, "coder"), dialAgent(t, sys, "coder")
			reviewer := dialAgent(t, sys, "reviewer")
			first, second, other := uniq(t, "first"), uniq(t, "second"), uniq(t, "other")
			release := make(chan struct{})
			var log runLog
			handler := func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				log.add(run.Task().ID)
				if run.Task().ID == first {
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return []byte("done " + run.Task().ID), nil
			}
			for _, a := range []*sdk.Agent{c1, c2, reviewer} {
				serve(t, a, handler)
				waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			}
			sc := schedulerpb.NewSchedulerServiceClient(c1.Conn())

			require.True(t, submit(t, sc, c1.ID(), first, 0, "repo:app path:src/a/**").GetAccepted())
			waitTask(t, sys, first, workflows.TaskRunning)
			res := submit(t, sc, c2.ID(), second, 0, "repo:app path:src/b/**")
			require.True(t, res.GetAccepted(), "queued, not refused (§9.1)")
			assert.True(t, strings.HasPrefix(res.GetReason(), `queued: max_parallel_instances=1 of agent type "coder" reached`),
				"the requester is told why (§9.1 feedback): %s", res.GetReason())
			require.True(t, submit(t, sc, reviewer.ID(), other, 0, "repo:docs path:guide/**").GetAccepted())
			waitTask(t, sys, other, workflows.TaskCompleted)

			// Held past two re-checks (every 2 s) while the slot is taken.
			time.Sleep(workflows.DefaultTaskRecheck*2 + 500*time.Millisecond)
			st, err := taskStatus(t, sys, second)
			require.NoError(t, err)
			assert.Equal(t, workflows.TaskWaiting, st.State, "held while the only coder slot is busy")
			assert.NotContains(t, log.get(), second, "never dispatched while held")

			close(release)
			waitTask(t, sys, first, workflows.TaskCompleted)
			st = waitTask(t, sys, second, workflows.TaskCompleted)
			assert.Equal(t, "done "+second, st.Result)
			assert.Equal(t, []string{"ADMITTING", "WAITING", "QUEUED", "SCHEDULED", "RUNNING", "COMPLETED"}, st.History,
				"admitted once the slot freed")
		})
	}
}

// TestRequestPreemption covers SchedulerService.RequestPreemption (§7.2) end to end on both
// stores: the running task's agent gets PREEMPT_REQUEST with the caller's reason, yields at
// its next safe point, the task is SUSPENDED and — nothing else being queued — resumed and
// completed; bad input is InvalidArgument and an agent without a lifecycle NotFound.
func TestRequestPreemption(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a := dialAgent(t, sys, "worker")
			var yieldedWith atomic.Value
			serve(t, a, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				if run.Task().Resumed {
					return []byte("resumed and done"), nil
				}
				for {
					if err := run.SafePoint(); err != nil {
						if errors.Is(err, sdk.ErrPreempted) {
							yieldedWith.Store(err.Error())
						}
						return nil, err
					}
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
			task := uniq(t, "long")
			require.True(t, submit(t, sc, a.ID(), task, 0, "repo:app path:src/**").GetAccepted())
			waitTask(t, sys, task, workflows.TaskRunning)

			resp, err := sc.RequestPreemption(ctx, &schedulerpb.PreemptRequest{AgentId: a.ID(), TaskId: task, Reason: "operator maintenance"})
			require.NoError(t, err)
			assert.True(t, resp.GetEnqueued())
			st := waitTask(t, sys, task, workflows.TaskCompleted)
			assert.Equal(t, "resumed and done", st.Result)
			assert.Equal(t, 1, st.Suspensions)
			assert.Equal(t, []string{"ADMITTING", "QUEUED", "SCHEDULED", "RUNNING", "SUSPENDED", "RESUMED", "RUNNING", "COMPLETED"}, st.History)
			reason, _ := yieldedWith.Load().(string)
			assert.Contains(t, reason, "operator maintenance", "the PREEMPT_REQUEST carries the caller's reason")
			require.Eventually(t, func() bool {
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{AgentID: a.ID(), TypePrefix: "task.preemption_requested"})
				return err == nil && len(evs) == 1
			}, 10*time.Second, 50*time.Millisecond, "the request is audited (§19)")

			_, err = sc.RequestPreemption(ctx, &schedulerpb.PreemptRequest{AgentId: ""})
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			_, err = sc.RequestPreemption(ctx, &schedulerpb.PreemptRequest{AgentId: uniq(t, "nobody"), TaskId: task})
			assert.Equal(t, codes.NotFound, status.Code(err), "no lifecycle to preempt")
		})
	}
}

// TestAckTimeoutRetriesExhaustedGoToDLQ covers the sweep's retry budget (§11, §21.1) end to
// end on both stores with SW4RM_MAX_RETRIES=1: a message nobody confirms is TIMED_OUT with a
// NACK ack_timeout and stays out of the DLQ while its producer may retry; the retry (same
// token, retry_count 1) times out too, and having used the budget it is dead-lettered as
// retries_exhausted, with its diagnostic context, before its producer gets the NACK.
func TestAckTimeoutRetriesExhaustedGoToDLQ(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.AckTimeout = time.Second
			cfg.MaxRetries = 1
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn := pair(t, sys) // b opens no stream: nothing it is sent is confirmed
			a.SetMaxRetries(0)        // the test sends the retry itself
			dlq := func() []store.DLQEntry {
				es, err := sys.app.Store().DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: a.ID()})
				require.NoError(t, err)
				return es
			}
			token := a.ID() + ":op:1"
			m1, err := a.Send(ctx, sdk.Message{To: b.ID(), IdempotencyToken: token, Payload: []byte(`{"n":1}`)})
			require.NoError(t, err)
			n1, _ := aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_TIMED_OUT)).AckPayload()
			assert.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, n1.ErrorCode)
			assert.Empty(t, dlq(), "the first timeout leaves a retry to the producer")

			m2, err := a.Send(ctx, sdk.Message{To: b.ID(), IdempotencyToken: token, Payload: []byte(`{"n":1}`), RetryCount: 1})
			require.NoError(t, err)
			n2, _ := aIn.next(t, true, ackFor(m2.GetMessageId(), commonpb.AckStage_TIMED_OUT)).AckPayload()
			assert.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, n2.ErrorCode)
			es := dlq()
			require.Len(t, es, 1, "dead-lettered before its producer hears of it")
			e := es[0]
			assert.Equal(t, store.DLQRetriesExhausted, e.Class)
			assert.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, e.ErrorCode)
			assert.Equal(t, m2.GetMessageId(), e.MessageID)
			assert.Equal(t, b.ID(), e.RecipientID)
			assert.Equal(t, token, e.IdempotencyToken)
			assert.Contains(t, e.Reason, "retry budget of 1 exhausted")
			require.NotEmpty(t, e.Attempts)
			last := e.Attempts[len(e.Attempts)-1]
			assert.Equal(t, m2.GetMessageId(), last.MessageID, "the attempt history ends with the exhausted retry (§21.1)")
			assert.Equal(t, "TIMED_OUT", last.State)
			rec, err := sys.app.Store().Messages().GetMessage(ctx, m2.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT, rec.State)
		})
	}
}
