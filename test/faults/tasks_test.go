package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// taskAgent is an agent process that runs tasks with the SDK's Serve: each task takes work,
// or waits for gate when one is set. Serve reopens a stream that breaks by itself and ends
// only on a permanent failure; the agent then serves again, as an agent process that must
// outlive anything does.
type taskAgent struct {
	agent *sdk.Agent
	work  time.Duration
	acks  *ackWatch

	mu      sync.Mutex
	gate    chan struct{}
	starts  map[string]int // task_id → handler runs
	ended   map[string]bool
	serves  int
	waiting int // handlers waiting for gate
}

func newTaskAgent(a *sdk.Agent, acks *ackWatch, work time.Duration) *taskAgent {
	return &taskAgent{agent: a, acks: acks, work: work, starts: map[string]int{}, ended: map[string]bool{}}
}

// hold makes the next tasks wait until release.
func (ta *taskAgent) hold() {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.gate = make(chan struct{})
}

// release lets held tasks finish.
func (ta *taskAgent) release() {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.gate != nil {
		close(ta.gate)
		ta.gate = nil
	}
}

func (ta *taskAgent) handle(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
	id := run.Task().ID
	ta.mu.Lock()
	ta.starts[id]++
	gate := ta.gate
	if gate != nil {
		ta.waiting++
	}
	ta.mu.Unlock()
	wait := time.After(ta.work)
	if gate != nil {
		wait = nil
	}
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-gate:
	case <-wait:
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if gate != nil {
		ta.waiting--
	}
	if err != nil {
		return nil, err
	}
	ta.ended[id] = true
	return []byte(`{"done":"` + id + `"}`), nil
}

// held reports whether a handler is waiting for gate.
func (ta *taskAgent) held() bool {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.waiting > 0
}

// started reports whether the task's handler began.
func (ta *taskAgent) started(id string) bool {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.starts[id] > 0
}

// serve runs the agent until ctx ends; the returned function waits for it.
func (ta *taskAgent) serve(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ta.mu.Lock()
			ta.serves++
			ta.mu.Unlock()
			_ = ta.agent.Serve(ctx, ta.handle, nil)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { <-done }
}

// streamCount counts the inbound streams an agent opens.
type streamCount struct{ n atomic.Int64 }

// interceptor is the gRPC client interceptor that counts them.
func (c *streamCount) interceptor() grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == routerpb.RouterService_StreamIncoming_FullMethodName {
			c.n.Add(1)
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

// ackWatch observes, from the agent's side of the wire, the ACKs FULFILLED the SDK sends for
// the scheduler's RUNs, and what the server answered.
type ackWatch struct {
	mu      sync.Mutex
	answers []error
}

// interceptor is the gRPC client interceptor that records the answers.
func (w *ackWatch) interceptor() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := req.(*routerpb.SendMessageRequest); ok && r.GetMsg().GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
			if a, perr := protocol.ParseAck(r.GetMsg()); perr == nil && a.Stage == commonpb.AckStage_FULFILLED {
				if res, ok := reply.(*routerpb.SendMessageResponse); ok && err == nil && !res.GetAccepted() {
					err = fmt.Errorf("rejected: %s", res.GetReason())
				}
				w.mu.Lock()
				w.answers = append(w.answers, err)
				w.mu.Unlock()
			}
		}
		return err
	})
}

// count returns how many ACKs FULFILLED were answered, and the errors among the answers.
func (w *ackWatch) count() (int, []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, e := range w.answers {
		if e != nil {
			errs = append(errs, e)
		}
	}
	return len(w.answers), errs
}

// operator submits tasks with SchedulerService.SubmitTask and follows them in Temporal, as an
// operator with the CLI and the UI would. A submission that fails without an answer is
// retried with the same task_id; a retry told the task_id was already submitted counts as
// accepted (the earlier attempt went through).
type operator struct {
	sched    schedulerpb.SchedulerServiceClient
	temporal client.Client

	mu       sync.Mutex
	accepted map[string]string // task_id → agent_id
	order    []string
	refused  map[string]string // task_id → reason
	errors   int
}

func newOperator(conn grpc.ClientConnInterface, tc client.Client) *operator {
	return &operator{sched: schedulerpb.NewSchedulerServiceClient(conn), temporal: tc, accepted: map[string]string{}, refused: map[string]string{}}
}

// submit submits one task to agentID, retrying for at most a minute.
func (o *operator) submit(ctx context.Context, agentID, taskID string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := o.sched.SubmitTask(actx, &schedulerpb.SubmitTaskRequest{AgentId: agentID, TaskId: taskID, Scope: "resource:" + taskID,
			Params: []byte(`{"task":"` + taskID + `"}`), ContentType: "application/json"})
		acancel()
		o.mu.Lock()
		switch {
		case err != nil:
			o.errors++
		case res.GetAccepted(), attempt > 0 && strings.HasPrefix(res.GetReason(), "duplicate_detected: task_id"):
			o.accepted[taskID] = agentID
			o.order = append(o.order, taskID)
			o.mu.Unlock()
			return
		default:
			o.refused[taskID] = res.GetReason()
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			o.mu.Lock()
			o.refused[taskID] = "no answer within a minute"
			o.mu.Unlock()
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// status queries a task's workflow.
func (o *operator) status(ctx context.Context, taskID string) (workflows.TaskStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := o.temporal.QueryWorkflow(ctx, workflows.TaskWorkflowID(taskID), "", workflows.TaskStatusQuery)
	if err != nil {
		return workflows.TaskStatus{}, err
	}
	var st workflows.TaskStatus
	return st, v.Get(&st)
}

// waitCompleted waits until every accepted task is COMPLETED and returns the states of those
// that are not.
func (o *operator) waitCompleted(ctx context.Context, timeout time.Duration) map[string]string {
	o.mu.Lock()
	pending := slices.Clone(o.order)
	o.mu.Unlock()
	notDone := map[string]string{}
	_ = waitFor(timeout, 250*time.Millisecond, func() bool {
		pending = slices.DeleteFunc(pending, func(id string) bool {
			st, err := o.status(ctx, id)
			if err != nil {
				notDone[id] = "query failed: " + err.Error()
				return false
			}
			if st.State == workflows.TaskCompleted {
				delete(notDone, id)
				return true
			}
			notDone[id] = st.State
			return false
		})
		return len(pending) == 0
	})
	return notDone
}

// taskFigures adds the operator's and the agents' counts to f, given the tasks that did not
// complete.
func taskFigures(f *figures, o *operator, notDone map[string]string, agents ...*taskAgent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f.accepted += len(o.accepted)
	f.strandedTasks += len(notDone)
	runs, twice := 0, 0
	for _, ta := range agents {
		ta.mu.Lock()
		for _, n := range ta.starts {
			runs += n
			if n > 1 {
				twice++
			}
		}
		ta.mu.Unlock()
	}
	f.duplicated += twice
	f.add("tasks=%d task_runs=%d submit_errors=%d", len(o.accepted), runs, o.errors)
	if len(o.refused) > 0 {
		f.add("tasks_refused=%d", len(o.refused))
		f.problem("tasks refused: %v", o.refused)
	}
	if len(notDone) > 0 {
		states := map[string]int{}
		for _, s := range notDone {
			states[s]++
		}
		f.add("stranded_states=%v", states)
	}
}

// taskID names the i-th task of a scenario (each scenario has a Temporal of its own).
func taskID(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
