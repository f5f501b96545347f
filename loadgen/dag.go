package loadgen

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
)

// dags is the DAG pattern.
type dags struct {
	l    *ledger
	srv  servers
	fan  int
	wc   workflowpb.WorkflowServiceClient
	next atomic.Int64
	mu   sync.Mutex
	// nodeRuns counts completed handler runs per "<workflow_id>/<node_id>".
	nodeRuns map[string]int
}

func (d *dags) setup(ctx context.Context, r *runner) error {
	d.fan = r.cfg.Fan
	d.nodeRuns = map[string]int{}
	d.srv.l = d.l
	d.srv.onDone = func(_ taskParams, taskID string, _ int) {
		// A node's task ids are dag-<workflow_id>-<node_id>-<attempt>; the node ids here
		// have no "-". A later attempt of a node that completed is a second run too.
		rest, ok := strings.CutPrefix(taskID, "dag-")
		if !ok {
			return
		}
		if i := strings.LastIndex(rest, "-"); i >= 0 {
			rest = rest[:i]
		}
		i := strings.LastIndex(rest, "-")
		if i < 0 {
			return
		}
		wf, node := rest[:i], rest[i+1:]
		d.mu.Lock()
		d.nodeRuns[wf+"/"+node]++
		n := d.nodeRuns[wf+"/"+node]
		d.mu.Unlock()
		if n > 1 {
			d.l.double(wf)
		}
	}
	if err := d.srv.setup(ctx, r, "node", r.cfg.NodeAgents); err != nil {
		return err
	}
	d.wc = workflowpb.NewWorkflowServiceClient(d.srv.agents[0].ClientConn())
	return nil
}

// definition is root → fan nodes → join, spread over the node agents.
func (d *dags) definition(id string) (*workflowpb.WorkflowDefinition, error) {
	agents := d.srv.agents
	pick := func() *sdk.Agent { return agents[int(d.next.Add(1))%len(agents)] }
	b := dag.New(id)
	b.Node("root", pick().ID())
	var fan []string
	for i := range d.fan {
		n := "n" + strconv.Itoa(i)
		fan = append(fan, n)
		b.Node(n, pick().ID()).After("root")
	}
	b.Node("join", pick().ID()).After(fan...)
	return b.Build()
}

func (d *dags) op(ctx context.Context, id string) {
	o := d.l.start(id)
	def, err := d.definition(id)
	if err != nil {
		d.l.note("build_error", 1)
		d.l.refuse(id)
		return
	}
	var cres *workflowpb.CreateWorkflowResponse
	err = retry(ctx, d.l, func(ctx context.Context) error {
		var err error
		cres, err = d.wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
		return err
	})
	if err != nil || !cres.GetSuccess() {
		if ctx.Err() == nil {
			d.l.note("create_refused", 1)
			d.l.refuse(id)
		}
		return
	}
	attempts := 0
	err = retry(ctx, d.l, func(ctx context.Context) error {
		attempts++
		_, err := d.wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
		return err
	})
	switch {
	case err == nil, attempts > 1 && status.Code(err) == codes.AlreadyExists:
		// already_in_progress to a retry: the earlier attempt started the run.
		d.l.ack(id)
	case ctx.Err() != nil:
		return
	default:
		d.l.note("start_refused", 1)
		d.l.refuse(id)
		return
	}
	pollUntil(ctx, o, func() bool {
		switch d.state(ctx, id) {
		case dag.RunCompleted:
			d.l.complete(id)
		case "FAILED", dag.RunWaiting:
			d.l.fail(id)
		default:
			return false
		}
		return true
	})
}

// state is the run's status, "" when it could not be read.
func (d *dags) state(ctx context.Context, id string) string {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	res, err := d.wc.GetWorkflowState(actx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
	if err != nil {
		return ""
	}
	return dag.RunStatus(res.GetState())
}

// probe marks the unfinished runs still RUNNING as in flight.
func (d *dags) probe(ctx context.Context) {
	for _, id := range d.l.unfinished() {
		d.l.setInFlight(id, d.state(ctx, id) == dag.RunRunning)
	}
}
