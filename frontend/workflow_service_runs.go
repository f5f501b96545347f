package frontend

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Runs of DAG workflows (§17.7): StartWorkflow starts dag/<workflow_id> from the latest stored
// definition, GetWorkflowState answers from the open run's query or the closed run's result,
// and ResumeWorkflow re-runs a node and its descendants — on the open run through a validated
// update, on a closed run as a new execution that carries the old one's state. The canonical
// ResumeWorkflowRequest also carries the two ways to release a waiting node, as documented
// metadata (docs/dag.md): {"action": "trigger"} releases a MANUAL node, {"event": "<name>"}
// releases the EVENT nodes waiting for that name.

// Metadata keys of ResumeWorkflowRequest.metadata.
const (
	// DAGActionMetadataKey set to "trigger" makes ResumeWorkflow the authenticated trigger of
	// the MANUAL node node_id.
	DAGActionMetadataKey = "action"
	// DAGEventMetadataKey makes ResumeWorkflow deliver a named event to the run (node_id may be
	// empty): every PENDING EVENT node whose metadata "event" equals it is released.
	DAGEventMetadataKey = "event"
)

// StartWorkflow starts the run of the latest stored definition of workflow_id with the
// initial workflow_data (a JSON object; empty means {}). A run already open is refused with
// AlreadyExists naming it.
func (w *workflowService) StartWorkflow(ctx context.Context, req *workflowpb.StartWorkflowRequest) (*workflowpb.StartWorkflowResponse, error) {
	id := req.GetWorkflowId()
	if perr := dag.ValidateRunID(id); perr != nil {
		return nil, perr
	}
	data, perr := dag.DataObject(req.GetWorkflowData())
	if perr != nil {
		return nil, perr
	}
	if err := w.s.decideDAG(ctx, id, "start"); err != nil {
		return nil, err
	}
	rec, err := w.s.store.Definitions().GetDefinition(ctx, id, 0)
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no workflow definition %q: create it with CreateWorkflow first", id)
	}
	if err != nil {
		return nil, failed("definition lookup", err)
	}
	in := workflows.DAGRunInput{WorkflowID: id, Version: rec.Version, Definition: rec.Definition, Data: data, Metadata: req.GetMetadata(), Revision: workflows.DAGRevisionCurrent}
	err = start(ctx, w.s.temporal, workflows.DAGStartOptions(id, w.s.cfg.TaskQueue), workflows.DAGRun, in)
	if classify(err) == temporalAlreadyStarted {
		return nil, protocol.Errorf(commonpb.ErrorCode_ALREADY_IN_PROGRESS, "workflow %q has an open run (%s); resume it, or wait until it completes", id, workflows.DAGWorkflowID(id))
	}
	if err != nil {
		return nil, temporalUnavailable("start the run", err)
	}
	w.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.DAGWorkflowID(id), Actor: auth.FromContext(ctx).String(), Type: "workflow.started",
		Details: map[string]any{"version": rec.Version}})
	st, err := w.state(ctx, id)
	if err != nil {
		return nil, err
	}
	return &workflowpb.StartWorkflowResponse{WorkflowId: id, State: st, Success: true}, nil
}

// GetWorkflowState answers the run's node states, outputs, errors and workflow_data, while
// it is open and after it closed.
func (w *workflowService) GetWorkflowState(ctx context.Context, req *workflowpb.GetWorkflowStateRequest) (*workflowpb.GetWorkflowStateResponse, error) {
	if perr := dag.ValidateRunID(req.GetWorkflowId()); perr != nil {
		return nil, perr
	}
	if err := w.s.decideDAG(ctx, req.GetWorkflowId(), "read"); err != nil {
		return nil, err
	}
	st, err := w.state(ctx, req.GetWorkflowId())
	if err != nil {
		return nil, err
	}
	return &workflowpb.GetWorkflowStateResponse{State: st, Success: true}, nil
}

// ResumeWorkflow re-runs node_id and its descendants, optionally with new workflow_data
// (§17.7); COMPLETED nodes elsewhere never run again. A closed run is resumed as a new
// execution carrying its state. With metadata action=trigger it is the trigger of a MANUAL
// node, with metadata event=<name> the delivery of a named event.
func (w *workflowService) ResumeWorkflow(ctx context.Context, req *workflowpb.ResumeWorkflowRequest) (*workflowpb.ResumeWorkflowResponse, error) {
	md := req.GetMetadata()
	kind, data, perr := dag.ValidateResume(req, md[DAGActionMetadataKey], md[DAGEventMetadataKey])
	if perr != nil {
		return nil, perr
	}
	id, by := req.GetWorkflowId(), auth.FromContext(ctx).String()
	if err := w.s.decideDAG(ctx, id, "resume"); err != nil {
		return nil, err
	}
	if err := w.resume(ctx, kind, req, data, by); err != nil {
		return nil, err
	}
	w.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.DAGWorkflowID(id), Actor: by, Type: "workflow.resumed",
		Details: map[string]any{"node_id": req.GetNodeId(), "metadata": md}})
	st, err := w.state(ctx, id)
	if err != nil {
		return nil, err
	}
	return &workflowpb.ResumeWorkflowResponse{WorkflowId: id, State: st, Success: true}, nil
}

// resume delivers a validated ResumeWorkflow of the given kind to the run: an event signal,
// a trigger update, or a resume update — of the open run, else of a new execution carrying
// the closed run's state.
func (w *workflowService) resume(ctx context.Context, kind dag.ResumeKind, req *workflowpb.ResumeWorkflowRequest, data, by string) error {
	id, node := req.GetWorkflowId(), req.GetNodeId()
	switch kind {
	case dag.ResumeEvent:
		ev := workflows.DAGEvent{Name: req.GetMetadata()[DAGEventMetadataKey], By: by}
		if err := w.s.temporal.SignalWorkflow(ctx, workflows.DAGWorkflowID(id), "", workflows.DAGEventSignal, ev); err != nil {
			return w.runError(ctx, id, "deliver the event", err)
		}
		return nil
	case dag.ResumeTriggerNode:
		return w.update(ctx, id, workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: node, By: by})
	}
	resume := workflows.DAGResume{NodeID: node, Data: data, By: by}
	err := w.update(ctx, id, workflows.DAGResumeUpdate, resume)
	if errors.Is(err, errRunClosed) {
		err = w.resumeClosed(ctx, id, resume)
	}
	return err
}

// errRunClosed reports that the run has no open execution to update.
var errRunClosed = errors.New("the run is closed")

// update sends a validated update to the open run and waits for its answer.
func (w *workflowService) update(ctx context.Context, id, name string, arg any) error {
	wid := workflows.DAGWorkflowID(id)
	_, err := update[none](ctx, w.s.temporal, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: name, Args: []any{arg}})
	if err == nil {
		return nil
	}
	switch w.s.settle(ctx, wid, err) {
	case temporalRefused:
		if app := refusalOf(err); app.Type() == workflows.DAGUpdateRefused {
			return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
		}
	case temporalClosed, temporalClosing:
		return errRunClosed
	}
	return w.runError(ctx, id, "reach the run", err)
}

// resumeClosed resumes a closed run: a new execution of dag/<id> that starts from the last
// one's state with the resume applied before anything runs.
func (w *workflowService) resumeClosed(ctx context.Context, id string, resume workflows.DAGResume) error {
	prior, err := w.closedState(ctx, id)
	if err != nil {
		return err
	}
	if _, ok := prior.Nodes[resume.NodeID]; !ok {
		return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "workflow %q has no node %q", id, resume.NodeID)
	}
	rec, err := w.s.store.Definitions().GetDefinition(ctx, id, prior.Version)
	if err != nil {
		return failed("definition lookup", err)
	}
	in := workflows.DAGRunInput{WorkflowID: id, Version: prior.Version, Definition: rec.Definition, Metadata: prior.Metadata, Prior: &prior, Resume: &resume, Revision: workflows.DAGRevisionCurrent}
	err = start(ctx, w.s.temporal, workflows.DAGStartOptions(id, w.s.cfg.TaskQueue), workflows.DAGRun, in)
	if classify(err) == temporalAlreadyStarted {
		// Another resume started it first: this one goes to the open run.
		return w.update(ctx, id, workflows.DAGResumeUpdate, resume)
	}
	if err != nil {
		return temporalUnavailable("resume the closed run", err)
	}
	return nil
}

// state reads the run's state: the open run's query, else the closed run's result.
func (w *workflowService) state(ctx context.Context, id string) (*workflowpb.WorkflowState, error) {
	st, open, err := queryOpen[workflows.DAGRunState](ctx, w.s.temporal, workflows.DAGWorkflowID(id), workflows.DAGStateQuery)
	switch {
	case open && err == nil:
		return wireState(st), nil
	case open:
		return nil, err // the state did not decode
	case err != nil && classify(err) != temporalNotFound:
		return nil, w.runError(ctx, id, "query the run", err)
	}
	st, err = w.closedState(ctx, id)
	if err != nil {
		return nil, err
	}
	return wireState(st), nil
}

// closedState is the result of the latest execution of dag/<id>, which has closed.
func (w *workflowService) closedState(ctx context.Context, id string) (workflows.DAGRunState, error) {
	var st workflows.DAGRunState
	run := w.s.temporal.GetWorkflow(ctx, workflows.DAGWorkflowID(id), "")
	if err := run.Get(ctx, &st); err != nil {
		return st, w.runError(ctx, id, "read the run's result", err)
	}
	return st, nil
}

// runError maps a Temporal error about dag/<id>: no run is NotFound (no_route).
func (w *workflowService) runError(ctx context.Context, id, what string, err error) error {
	if classify(err) == temporalNotFound {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "workflow %q has no run: start it with StartWorkflow", id)
	}
	return temporalUnavailable(what, err)
}

// wireState is a run's state as the canonical WorkflowState.
func wireState(st workflows.DAGRunState) *workflowpb.WorkflowState {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	out := &workflowpb.WorkflowState{WorkflowId: st.WorkflowID, NodeStates: make(map[string]*workflowpb.NodeState, len(st.Nodes)),
		WorkflowData: st.Data, StartedAt: ts(st.StartedAt), CompletedAt: ts(st.CompletedAt), Metadata: map[string]string{}}
	for k, v := range st.Metadata {
		out.Metadata[k] = v
	}
	// The run's own status travels in metadata: WorkflowState has no field for it.
	out.Metadata[wire.RunStatusKey] = st.Status
	for id, n := range st.Nodes {
		out.NodeStates[id] = &workflowpb.NodeState{NodeId: id, Status: n.Status, StartedAt: ts(n.StartedAt), CompletedAt: ts(n.CompletedAt),
			Output: n.Output, Error: n.Error}
	}
	return proto.Clone(out).(*workflowpb.WorkflowState)
}
