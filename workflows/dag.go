package workflows

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
)

// KindDAG is the SW4RMKind search-attribute value of DAG runs.
const KindDAG = "dag"

// Names of the DAG run's messages (§17.7).
const (
	// DAGStateQuery returns the DAGRunState.
	DAGStateQuery = "state"
	// DAGResumeUpdate carries a DAGResume (ResumeWorkflow); it returns the DAGRunState once
	// the node and its descendants are PENDING again.
	DAGResumeUpdate = "resume"
	// DAGTriggerUpdate carries a DAGTrigger, the authenticated trigger of one MANUAL node; it
	// returns the DAGRunState once the trigger is recorded.
	DAGTriggerUpdate = "trigger"
	// DAGEventSignal carries a DAGEvent, which releases the EVENT nodes waiting for it.
	DAGEventSignal = "event"
)

// DAG run states, the value of SW4RMDAGState.
const (
	// DAGRunning: nodes run or wait for their dependencies or triggers.
	DAGRunning = "RUNNING"
	// DAGWaiting: a node FAILED (after its retries) and nothing is running; the run stays
	// open until ResumeWorkflow.
	DAGWaiting = "WAITING"
	// DAGCompleted: every node is COMPLETED or SKIPPED; the run closed.
	DAGCompleted = "COMPLETED"
	// DAGFailed: the run could not start, e.g. its definition does not validate.
	DAGFailed = "FAILED"
)

// DAGUpdateRefused is the error type of a refused resume or trigger update (unknown node, a
// node not in a state the call needs). The frontend answers it with InvalidArgument or
// FailedPrecondition; a refused update leaves nothing in history.
const DAGUpdateRefused = "dag_update_refused"

// DAGHistoryLimit is the history length past which a run continues as new (at a quiescent
// point), even if Temporal has not suggested it yet.
const DAGHistoryLimit = 10_000

// DAGLargeOutput is the size above which a node's output is stored as an artifact
// (activities.StoreDAGOutput) and the run's state keeps only its reference.
const DAGLargeOutput = 64 << 10

// maxDAGTaskIDLen is the task-id length limit of SubmitTask (protocol/scheduling.MaxTaskIDLen).
const maxDAGTaskIDLen = 200

// DAGWorkflowID is the workflow ID of a DAG run: "dag/<workflow_id>". It is also the run's
// correlation id: a message on it can deliver an event to the run (dag.EventOf).
func DAGWorkflowID(workflowID string) string { return dag.RunCorrelationPrefix + workflowID }

// DAGStartOptions are the start options of workflow dag/<workflowID> on taskQueue. A closed
// run may be resumed by a new execution (reuse allowed), but a second start of an open run
// fails.
func DAGStartOptions(workflowID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: DAGWorkflowID(workflowID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(KindKey.ValueSet(KindDAG), DAGStateKey.ValueSet(DAGRunning)),
		StaticSummary:                            summary("DAG run of workflow %s (§17.7)", workflowID),
	}
}

// DAGTaskID is the task id of one attempt of a node: "dag-<workflow_id>-<node_id>-<attempt>",
// with characters SubmitTask refuses (spaces, controls, invalid UTF-8) replaced by "_", and,
// when longer than SubmitTask allows, cut and completed with a hash of the whole so distinct
// nodes keep distinct ids.
func DAGTaskID(workflowID, nodeID string, attempt int) string {
	raw := "dag-" + workflowID + "-" + nodeID + "-" + strconv.Itoa(attempt)
	var b strings.Builder
	for i, r := range raw {
		if r == utf8.RuneError && !strings.HasPrefix(raw[i:], string(utf8.RuneError)) || r <= ' ' || r == 0x7f {
			r = '_'
		}
		b.WriteRune(r)
	}
	id := b.String()
	if len(id) <= maxDAGTaskIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(raw))
	suffix := "-" + hex.EncodeToString(sum[:8]) + "-" + strconv.Itoa(attempt)
	cut := maxDAGTaskIDLen - len(suffix)
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + suffix
}

// DAGRunInput starts a DAG run (StartWorkflow), resumes a closed one, or continues one as new.
type DAGRunInput struct {
	// WorkflowID and Version name the stored definition.
	WorkflowID string
	Version    int
	// Definition is the marshalled workflowpb.WorkflowDefinition; its JSON is the
	// definition's protojson (see MarshalJSON).
	Definition []byte
	// Data is the initial workflow_data, a JSON object; empty means "{}". Ignored with Prior.
	Data string `json:",omitempty"`
	// Metadata is StartWorkflow's metadata.
	Metadata map[string]string `json:",omitempty"`
	// Prior is the state of the execution before: set when a closed run is resumed (with
	// Resume) and on continue-as-new. Node states, outputs and workflow_data carry over;
	// COMPLETED nodes never run again.
	Prior *DAGRunState `json:",omitempty"`
	// Resume, with Prior, is the ResumeWorkflow of a closed run, applied before anything runs.
	Resume *DAGResume `json:",omitempty"`
	// ContinueAsNewAfter continues the run as new after this many node attempts finished in
	// one execution (0: only when Temporal suggests it or history passes DAGHistoryLimit).
	ContinueAsNewAfter int `json:",omitempty"`
	// Revision is the revision of the run's rules, chosen by whoever starts it
	// (DAGRevisionCurrent) and kept across continue-as-new. It is part of the input, so a
	// recorded history replays the rules it ran by without a version marker; runs recorded
	// before it existed decode it as zero.
	Revision int `json:",omitempty"`
}

// MarshalJSON writes Definition as the definition's protojson, an object the Temporal UI
// shows as it was created, not as base64 of protobuf bytes. Bytes that do not decode as a
// definition keep the base64 form, so the run still fails its validation as before.
func (in DAGRunInput) MarshalJSON() ([]byte, error) {
	type plain DAGRunInput
	var pj json.RawMessage
	def := &workflowpb.WorkflowDefinition{}
	if in.Definition != nil && proto.Unmarshal(in.Definition, def) == nil {
		var err error
		if pj, err = protojson.Marshal(def); err != nil {
			return nil, err
		}
	} else if b, err := json.Marshal(in.Definition); err == nil {
		pj = b
	} else {
		return nil, err
	}
	return json.Marshal(struct {
		plain
		Definition json.RawMessage
		Data       jsonform.JSONText `json:",omitempty"`
	}{plain(in), pj, jsonform.JSONText(in.Data)})
}

// UnmarshalJSON reads Definition as protojson or, as recorded histories and runs started
// before hold it, as base64 of the protobuf bytes.
func (in *DAGRunInput) UnmarshalJSON(data []byte) error {
	type plain DAGRunInput
	v := struct {
		*plain
		Definition json.RawMessage
		Data       jsonform.JSONText
	}{plain: (*plain)(in)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	in.Data = string(v.Data)
	d := bytes.TrimSpace(v.Definition)
	switch {
	case len(d) == 0 || bytes.Equal(d, []byte("null")):
		in.Definition = nil
	case d[0] == '{':
		def := &workflowpb.WorkflowDefinition{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(d, def); err != nil {
			return fmt.Errorf("DAG definition: %w", err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(def)
		if err != nil {
			return err
		}
		in.Definition = b
	default:
		if err := json.Unmarshal(d, &in.Definition); err != nil {
			return fmt.Errorf("DAG definition: %w", err)
		}
	}
	return nil
}

// Revisions of a DAG run's rules (DAGRunInput.Revision).
const (
	// DAGRevisionSpecDependencies follows §17.7 to the letter: a dependency is satisfied
	// only when COMPLETED, and a node with a SKIPPED dependency is SKIPPED in turn unless its
	// metadata after_skipped is "run"; a node whose dependencies are satisfied is READY until
	// it is dispatched (for MANUAL, EVENT and SCHEDULE nodes, until their trigger); and every
	// node transition is written to the audit log (§19, RecordDAGTransitions). Before it, a
	// SKIPPED dependency counted as satisfied, waiting nodes stayed PENDING and transitions
	// were only logged.
	DAGRevisionSpecDependencies = 1
	// DAGRevisionCurrent is the revision new runs take.
	DAGRevisionCurrent = DAGRevisionSpecDependencies
)

// DAGRunState is the answer of DAGStateQuery and of the updates, and the run's result.
type DAGRunState struct {
	// WorkflowID and Version name the definition.
	WorkflowID string
	Version    int
	// Status is DAGRunning, DAGWaiting or DAGCompleted.
	Status string
	// Nodes are the node states by node_id (for reading; the run decides in dag order).
	Nodes map[string]DAGNodeState
	// Data is the workflow_data, JSON.
	Data string
	// Metadata is StartWorkflow's metadata.
	Metadata map[string]string `json:",omitempty"`
	// StartedAt is when the run first started; CompletedAt when it completed. An unset time
	// is left out of the JSON (the Temporal UI would show 0001-01-01).
	StartedAt   time.Time `json:",omitzero"`
	CompletedAt time.Time `json:",omitzero"`
	// Runs counts the executions (1, then +1 per continue-as-new or resume of a closed run).
	Runs int
	// EventMessages are the message ids of the last DAGEventMemory events delivered by
	// message, oldest first.
	EventMessages []string `json:",omitempty"`
}

// DAGNodeState is one node's state.
type DAGNodeState struct {
	// Status is the node's status (§17.7 node status transitions); its JSON is the status's
	// name (see MarshalJSON).
	Status workflowpb.NodeStatus
	// StartedAt and CompletedAt are the last attempt's times; unset ones are left out.
	StartedAt   time.Time `json:",omitzero"`
	CompletedAt time.Time `json:",omitzero"`
	// Output is the last completed attempt's output, JSON, or "artifact:<...>" when larger
	// than DAGLargeOutput (activities.DAGOutputRef).
	Output string `json:",omitempty"`
	// Error is the last failure's reason.
	Error string `json:",omitempty"`
	// Attempts counts every attempt the node ever made (its task ids end in it).
	Attempts int
	// TaskID is the last attempt's task.
	TaskID string `json:",omitempty"`
	// Tries counts the attempts since the node became PENDING (for metadata "retries");
	// a resume starts it again from zero.
	Tries int `json:",omitempty"`
	// Released is set when a MANUAL node was triggered, an EVENT node's event arrived or a
	// SCHEDULE node's time came (or a resume named the node).
	Released bool `json:",omitempty"`
	// DueAt is a SCHEDULE node's next cron time, set once its dependencies are done.
	DueAt time.Time `json:",omitzero"`
}

// MarshalJSON writes the workflow_data as JSON rather than a string of it (jsonform.JSONText).
func (st DAGRunState) MarshalJSON() ([]byte, error) {
	type plain DAGRunState
	return json.Marshal(struct {
		plain
		Data jsonform.JSONText
	}{plain(st), jsonform.JSONText(st.Data)})
}

// UnmarshalJSON reads the workflow_data as JSON or, as recorded histories hold it, as a
// string.
func (st *DAGRunState) UnmarshalJSON(data []byte) error {
	type plain DAGRunState
	v := struct {
		*plain
		Data jsonform.JSONText
	}{plain: (*plain)(st)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	st.Data = string(v.Data)
	return nil
}

// MarshalJSON writes Status by name ("FAILED", not 4) and a JSON Output as JSON, so the
// Temporal UI shows a run's state and result as §17.7 names them.
func (s DAGNodeState) MarshalJSON() ([]byte, error) {
	type plain DAGNodeState
	// The outer Status hides the embedded one (encoding/json takes the shallower field).
	return json.Marshal(struct {
		plain
		Status string
		Output jsonform.JSONText `json:",omitempty"`
	}{plain(s), s.Status.String(), jsonform.JSONText(s.Output)})
}

// UnmarshalJSON reads Status by name or, as recorded histories hold it, by number, and
// Output as JSON or a string.
func (s *DAGNodeState) UnmarshalJSON(data []byte) error {
	type plain DAGNodeState
	v := struct {
		*plain
		Status json.RawMessage
		Output jsonform.JSONText
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	s.Output = string(v.Output)
	if v.Status == nil {
		return nil
	}
	n, err := jsonform.UnmarshalEnum(v.Status, workflowpb.NodeStatus_value)
	if err != nil {
		return fmt.Errorf("DAG node status: %w", err)
	}
	s.Status = workflowpb.NodeStatus(n)
	return nil
}

// DAGResume is the payload of DAGResumeUpdate (ResumeWorkflow).
type DAGResume struct {
	// NodeID is the node to run again, with its descendants.
	NodeID string
	// Data, when set, replaces workflow_data (a JSON object).
	Data string `json:",omitempty"`
	// By is the proven caller.
	By string `json:",omitempty"`
}

// DAGTrigger is the payload of DAGTriggerUpdate.
type DAGTrigger struct {
	// NodeID is the MANUAL node to release.
	NodeID string
	// By is the proven caller.
	By string `json:",omitempty"`
}

// DAGEvent is the payload of DAGEventSignal.
type DAGEvent struct {
	// Name releases every PENDING EVENT node whose metadata "event" equals it.
	Name string
	// MessageID is the message that carried the event (dag.EventOf), empty for a named event
	// of ResumeWorkflow. The outbox delivers at least once: the run applies one message's
	// event once (it remembers the last DAGEventMemory of them).
	MessageID string `json:",omitempty"`
	// By is who sent it: the message's producer or ResumeWorkflow's proven caller.
	By string `json:",omitempty"`
}

// OutboxDAGEvent is the outbox entry kind that signals DAGEventSignal to dag/<workflow_id>
// after the router admitted a message carrying an event on the run's correlation (payload
// DAGEventPayload, written in the admission's transaction). A run that is closed or was never
// started has no node left to release: the frontend's handler records that and is done.
const OutboxDAGEvent = "dag.event"

// DAGEventPayload is the payload of an OutboxDAGEvent outbox entry.
type DAGEventPayload struct {
	// WorkflowID names the run (dag/<WorkflowID>).
	WorkflowID string
	// Event is the signal's argument.
	Event DAGEvent
}

// DAGEventMemory is how many message ids of recent events a run remembers to apply a
// repeated delivery of one message's event once.
const DAGEventMemory = 256

// DAGRun is the durable run of a DAG workflow (§17.7; 000 §3.11.3). Nodes run in dependency
// order as ordinary tasks (child TaskWorkflow runs, so a node inherits priorities,
// preemption, scope checks and HITL admission): a PENDING node whose dependencies are all
// COMPLETED or SKIPPED is SKIPPED when its metadata "skip_if" says so (its dependents still
// run), waits for its trigger (MANUAL: DAGTriggerUpdate; EVENT: DAGEventSignal; SCHEDULE: a
// durable timer to the next time of its metadata "schedule") and is then dispatched, many in
// parallel. Outputs are merged into workflow_data in topological order, never in completion
// order. A node that fails after metadata "retries" re-runs leaves its dependents PENDING;
// once nothing runs the run is WAITING and stays open until DAGResumeUpdate re-runs a node
// and its descendants (no other COMPLETED node ever runs again). The run continues as new at
// a quiescent point when its history grows large, and returns its state once every node is
// COMPLETED or SKIPPED.
func DAGRun(ctx workflow.Context, in DAGRunInput) (DAGRunState, error) {
	r := &dagRun{in: in}
	st, err := r.run(ctx)
	// An update being applied finishes, and its caller gets the answer, before the run ends.
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	return st, err
}

// dagDone is a finished child the main loop has not applied yet.
type dagDone struct {
	pos    int
	taskID string
	status TaskStatus
	err    error
}

// dagRun is one execution's state. Node states are kept by position in the topological
// order, so every decision iterates that order and never a map.
type dagRun struct {
	in    DAGRunInput
	def   *workflowpb.WorkflowDefinition
	order []string
	pos   map[string]int // lookups only
	deps  [][]int        // dependencies by position
	nodes []DAGNodeState
	st    DAGRunState

	done     []dagDone
	inflight int
	// dirty is set by whatever may let the main loop make progress.
	dirty bool
	// finished counts the attempts that finished in this execution.
	finished int
	draining bool
	// timers marks the SCHEDULE nodes (by position) whose timer this execution started, for
	// their DueAt.
	timers map[int]time.Time
	// stateSet is the last value of SW4RMDAGState upserted.
	stateSet string
	// events is the DAGEventSignal channel.
	events workflow.ReceiveChannel
	// transitions are the node transitions not audited yet (DAGRevisionSpecDependencies).
	transitions []activities.DAGTransition
}

// spec reports whether the run follows DAGRevisionSpecDependencies.
func (r *dagRun) spec() bool { return r.in.Revision >= DAGRevisionSpecDependencies }

// set moves node i to status to, and keeps the transition for the audit log when the run's
// revision audits them. Times and the other fields are the caller's to set.
func (r *dagRun) set(ctx workflow.Context, i int, to workflowpb.NodeStatus, reason string) {
	ns := &r.nodes[i]
	from := ns.Status
	ns.Status = to
	if !r.spec() {
		return
	}
	r.transitions = append(r.transitions, activities.DAGTransition{NodeID: r.order[i], From: from.String(), To: to.String(),
		At: workflow.Now(ctx), TaskID: ns.TaskID, Reason: reason})
}

// audit writes the transitions kept since the last call, in one local activity. A failure
// is logged and the run goes on: the audit must never hold a DAG back.
func (r *dagRun) audit(ctx workflow.Context) {
	if len(r.transitions) == 0 {
		return
	}
	in := activities.DAGTransitionsInput{WorkflowID: r.st.WorkflowID, Transitions: r.transitions}
	r.transitions = nil
	var acts *activities.Activities
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 5 * time.Second, MaximumAttempts: 5},
	})
	if err := workflow.ExecuteLocalActivity(lctx, acts.RecordDAGTransitions, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("DAG transitions not audited", "workflow_id", r.st.WorkflowID, "transitions", len(in.Transitions), "error", err)
	}
}

func (r *dagRun) run(ctx workflow.Context) (DAGRunState, error) {
	if err := r.load(ctx); err != nil {
		r.st.Status = DAGFailed
		if uerr := r.setState(ctx); uerr != nil {
			workflow.GetLogger(ctx).Warn("could not set SW4RMDAGState", "error", uerr)
		}
		return r.snapshot(), temporal.NewNonRetryableApplicationError(err.Error(), "validation_error", err)
	}
	if err := r.handlers(ctx); err != nil {
		return r.snapshot(), err
	}
	if res := r.in.Resume; res != nil {
		if err := r.validateResume(*res); err != nil {
			return r.snapshot(), temporal.NewNonRetryableApplicationError(err.Error(), DAGUpdateRefused, err)
		}
		r.resume(ctx, *res)
	}
	for {
		if r.spec() {
			// Cleared before the step, not after: the step and the audit may block on a
			// local activity, and a child finishing meanwhile sets dirty again — clearing it
			// after them would lose that wake-up. Revision zero keeps its recorded order.
			r.dirty = false
		}
		r.step(ctx)
		// The UI shows it as the run's current details: its status and its nodes'.
		workflow.SetCurrentDetails(ctx, r.details())
		r.audit(ctx)
		if err := r.setState(ctx); err != nil {
			return r.snapshot(), err
		}
		if r.st.Status == DAGCompleted {
			return r.snapshot(), nil
		}
		if r.draining && r.inflight == 0 && len(r.done) == 0 {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return r.snapshot(), err
			}
			// An event that came in this very workflow task is kept, not lost with the run.
			for {
				var ev DAGEvent
				if !r.events.ReceiveAsync(&ev) {
					break
				}
				r.event(ctx, ev)
			}
			next := r.in
			prior := r.snapshot()
			next.Prior, next.Resume, next.Data = &prior, nil, ""
			return prior, workflow.NewContinueAsNewError(ctx, DAGRun, next)
		}
		if !r.spec() {
			r.dirty = false
		}
		if err := workflow.Await(ctx, func() bool { return r.dirty }); err != nil {
			return r.snapshot(), err
		}
	}
}

// load reads the definition, validates it, and sets up the node states (from Prior).
func (r *dagRun) load(ctx workflow.Context) error {
	now := workflow.Now(ctx)
	r.st = DAGRunState{WorkflowID: r.in.WorkflowID, Version: r.in.Version, Status: DAGRunning, Data: r.in.Data,
		Metadata: r.in.Metadata, StartedAt: now, Runs: 1}
	if r.st.Data == "" {
		r.st.Data = "{}"
	}
	r.def = &workflowpb.WorkflowDefinition{}
	if err := proto.Unmarshal(r.in.Definition, r.def); err != nil {
		return fmt.Errorf("validation_error: the definition does not decode: %w", err)
	}
	res, err := dag.Validate(r.def)
	if err != nil {
		return err
	}
	r.order = res.Order
	r.pos = make(map[string]int, len(r.order))
	for i, id := range r.order {
		r.pos[id] = i
	}
	r.deps = make([][]int, len(r.order))
	r.nodes = make([]DAGNodeState, len(r.order))
	for i, id := range r.order {
		for _, d := range r.def.GetNodes()[id].GetDependencies() {
			r.deps[i] = append(r.deps[i], r.pos[d])
		}
		r.nodes[i].Status = workflowpb.NodeStatus_PENDING
	}
	r.timers = map[int]time.Time{}
	if p := r.in.Prior; p != nil {
		r.st.Data, r.st.StartedAt, r.st.Runs, r.st.EventMessages = p.Data, p.StartedAt, p.Runs+1, p.EventMessages
		if p.Metadata != nil {
			r.st.Metadata = p.Metadata
		}
		for i, id := range r.order {
			ns, ok := p.Nodes[id]
			if !ok {
				continue // a node new in this definition version
			}
			if ns.Status == workflowpb.NodeStatus_RUNNING {
				// Never the case after continue-as-new (it waits for children); a state read
				// from a run that was terminated mid-node runs the node again. A READY node
				// (one waiting for its trigger) stays READY.
				ns.Status = workflowpb.NodeStatus_PENDING
			}
			r.nodes[i] = ns
		}
	}
	return nil
}

// handlers registers the query, the updates and the event signal.
func (r *dagRun) handlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, DAGStateQuery, func() (DAGRunState, error) { return r.snapshot(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, DAGResumeUpdate,
		func(ctx workflow.Context, u DAGResume) (DAGRunState, error) {
			r.resume(ctx, u)
			return r.snapshot(), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, u DAGResume) error {
			if err := r.validateResume(u); err != nil {
				return temporal.NewApplicationError(err.Error(), DAGUpdateRefused)
			}
			return nil
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, DAGTriggerUpdate,
		func(ctx workflow.Context, t DAGTrigger) (DAGRunState, error) {
			i := r.pos[t.NodeID]
			r.nodes[i].Released = true
			r.dirty = true
			workflow.GetLogger(ctx).Info("DAG node triggered", "workflow_id", r.st.WorkflowID, "node_id", t.NodeID, "by", t.By)
			return r.snapshot(), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, t DAGTrigger) error {
			if err := r.validateTrigger(t); err != nil {
				return temporal.NewApplicationError(err.Error(), DAGUpdateRefused)
			}
			return nil
		}}); err != nil {
		return err
	}
	r.events = workflow.GetSignalChannel(ctx, DAGEventSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var ev DAGEvent
			r.events.Receive(ctx, &ev)
			r.event(ctx, ev)
		}
	})
	return nil
}

// validateTrigger refuses a trigger of anything but a PENDING or READY MANUAL node whose
// dependencies are done and which was not triggered yet.
func (r *dagRun) validateTrigger(t DAGTrigger) error {
	i, ok := r.pos[t.NodeID]
	if !ok {
		return fmt.Errorf("validation_error: workflow %s has no node %q", r.st.WorkflowID, t.NodeID)
	}
	node, ns := r.def.GetNodes()[t.NodeID], r.nodes[i]
	switch {
	case node.GetTriggerType() != workflowpb.TriggerType_MANUAL:
		return fmt.Errorf("validation_error: node %s has trigger %s, not MANUAL", t.NodeID, node.GetTriggerType())
	case ns.Status != workflowpb.NodeStatus_PENDING && ns.Status != workflowpb.NodeStatus_READY:
		return fmt.Errorf("failed_precondition: node %s is %s, not PENDING or READY", t.NodeID, ns.Status)
	case ns.Released:
		return fmt.Errorf("failed_precondition: node %s was already triggered", t.NodeID)
	case !r.depsDone(i):
		return fmt.Errorf("failed_precondition: node %s still waits for its dependencies", t.NodeID)
	}
	return nil
}

// validateResume refuses a resume of an unknown node, of a node that neither FAILED nor
// COMPLETED while the run is not WAITING, bad workflow_data, and a resume that would reset a
// node still running.
func (r *dagRun) validateResume(u DAGResume) error {
	i, ok := r.pos[u.NodeID]
	if !ok {
		return fmt.Errorf("validation_error: workflow %s has no node %q", r.st.WorkflowID, u.NodeID)
	}
	s := r.nodes[i].Status
	if r.st.Status != DAGWaiting && s != workflowpb.NodeStatus_FAILED && s != workflowpb.NodeStatus_COMPLETED {
		return fmt.Errorf("failed_precondition: node %s is %s and the run is %s; resume a FAILED or COMPLETED node, or any node of a WAITING run", u.NodeID, s, r.st.Status)
	}
	if u.Data != "" {
		if d := strings.TrimSpace(u.Data); !json.Valid([]byte(d)) || !strings.HasPrefix(d, "{") {
			return errors.New("validation_error: workflow_data must be a JSON object")
		}
	}
	for _, j := range r.descendants(i) {
		if r.nodes[j].Status == workflowpb.NodeStatus_RUNNING {
			return fmt.Errorf("failed_precondition: node %s is still running; resume once it finished", r.order[j])
		}
	}
	return nil
}

// descendants are node i and every node that depends on it, directly or not, in order.
func (r *dagRun) descendants(i int) []int {
	in := map[int]bool{i: true}
	out := []int{i}
	for j := i + 1; j < len(r.order); j++ {
		if slices.ContainsFunc(r.deps[j], func(d int) bool { return in[d] }) {
			in[j] = true
			out = append(out, j)
		}
	}
	return out
}

// resume puts the node and its descendants back to PENDING (the named node released: the
// resume is its trigger; descendants wait for their triggers again) and replaces
// workflow_data when the resume carries some. Every other node keeps its state.
func (r *dagRun) resume(ctx workflow.Context, u DAGResume) {
	i := r.pos[u.NodeID]
	if u.Data != "" {
		r.st.Data = u.Data
	}
	for _, j := range r.descendants(i) {
		ns := &r.nodes[j]
		from := ns.Status
		*ns = DAGNodeState{Status: from, Attempts: ns.Attempts, TaskID: ns.TaskID, Released: j == i}
		r.set(ctx, j, workflowpb.NodeStatus_PENDING, "resumed from node "+u.NodeID)
	}
	r.st.Status, r.st.CompletedAt = DAGRunning, time.Time{}
	r.dirty = true
	workflow.GetLogger(ctx).Info("DAG run resumed", "workflow_id", r.st.WorkflowID, "node_id", u.NodeID, "by", u.By, "new_data", u.Data != "")
}

// event releases the PENDING EVENT nodes waiting for ev.Name (also before their
// dependencies are done: they run as soon as those are).
func (r *dagRun) event(ctx workflow.Context, ev DAGEvent) {
	if ev.MessageID != "" {
		if slices.Contains(r.st.EventMessages, ev.MessageID) {
			// A repeated delivery of the same message: its event was applied, and releasing
			// again could release a node that a resume has since put back to wait.
			workflow.GetLogger(ctx).Info("DAG event repeated", "workflow_id", r.st.WorkflowID, "event", ev.Name, "message_id", ev.MessageID)
			return
		}
		r.st.EventMessages = append(r.st.EventMessages, ev.MessageID)
		if over := len(r.st.EventMessages) - DAGEventMemory; over > 0 {
			r.st.EventMessages = slices.Delete(r.st.EventMessages, 0, over)
		}
	}
	n := 0
	for i, id := range r.order {
		node := r.def.GetNodes()[id]
		if node.GetTriggerType() == workflowpb.TriggerType_EVENT && node.GetMetadata()[dag.MetaEvent] == ev.Name &&
			(r.nodes[i].Status == workflowpb.NodeStatus_PENDING || r.nodes[i].Status == workflowpb.NodeStatus_READY) && !r.nodes[i].Released {
			r.nodes[i].Released = true
			n++
		}
	}
	r.dirty = true
	workflow.GetLogger(ctx).Info("DAG event", "workflow_id", r.st.WorkflowID, "event", ev.Name, "released", n, "message_id", ev.MessageID, "by", ev.By)
}

// depsDone reports whether node i's dependencies let it run: every one COMPLETED, or
// SKIPPED where a SKIPPED dependency counts as satisfied (see skippedBy).
func (r *dagRun) depsDone(i int) bool {
	after := !r.spec() || dag.RunsAfterSkipped(r.def.GetNodes()[r.order[i]])
	for _, d := range r.deps[i] {
		switch r.nodes[d].Status {
		case workflowpb.NodeStatus_COMPLETED:
		case workflowpb.NodeStatus_SKIPPED:
			if !after {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// skippedBy is the first SKIPPED dependency of node i, in dependency order, when that
// bypasses node i: under DAGRevisionSpecDependencies a node MUST NOT run until every
// dependency is COMPLETED (§17.7), which a SKIPPED one never will be, unless the node's
// metadata after_skipped is "run". Empty otherwise.
func (r *dagRun) skippedBy(i int) string {
	if !r.spec() || dag.RunsAfterSkipped(r.def.GetNodes()[r.order[i]]) {
		return ""
	}
	for _, d := range r.deps[i] {
		if r.nodes[d].Status == workflowpb.NodeStatus_SKIPPED {
			return r.order[d]
		}
	}
	return ""
}

// step applies the finished children in topological order, then skips or dispatches every
// node that may run, and works out the run's status.
func (r *dagRun) step(ctx workflow.Context) {
	slices.SortFunc(r.done, func(a, b dagDone) int { return a.pos - b.pos })
	done := r.done
	r.done = nil
	for _, d := range done {
		r.finish(ctx, d)
	}
	if !r.draining && r.continueSuggested(ctx) {
		// Start nothing new; continue as new once the children in flight are done, so none
		// is left behind (their results come to this execution).
		r.draining = true
		workflow.GetLogger(ctx).Info("DAG run draining to continue as new", "workflow_id", r.st.WorkflowID, "in_flight", r.inflight)
	}
	now := workflow.Now(ctx)
	for i, id := range r.order {
		ns := &r.nodes[i]
		switch ns.Status {
		case workflowpb.NodeStatus_PENDING:
			if by := r.skippedBy(i); by != "" {
				ns.StartedAt, ns.CompletedAt = now, now
				r.set(ctx, i, workflowpb.NodeStatus_SKIPPED, "dependency "+by+" was SKIPPED (§17.7: a node runs only once every dependency is COMPLETED; metadata after_skipped \"run\" lets it run)")
				continue
			}
			if !r.depsDone(i) {
				continue
			}
		case workflowpb.NodeStatus_READY:
		default:
			continue
		}
		node := r.def.GetNodes()[id]
		// Checked again at every step until the node is dispatched: its condition is read
		// when the node's turn comes, which a trigger may delay past later outputs.
		skip, err := dag.Skip(node, []byte(r.st.Data))
		if err != nil {
			r.fail(ctx, i, now, "skip_if: "+err.Error())
			continue
		}
		if skip {
			ns.StartedAt, ns.CompletedAt = now, now
			r.set(ctx, i, workflowpb.NodeStatus_SKIPPED, "skip_if "+node.GetMetadata()[dag.MetaSkipIf]+" is true")
			continue
		}
		if ns.Status == workflowpb.NodeStatus_PENDING && r.spec() {
			r.set(ctx, i, workflowpb.NodeStatus_READY, "")
		}
		if !r.released(ctx, i, node, now) || r.draining {
			continue
		}
		r.dispatch(ctx, i, node, now)
	}
	r.st.Status = r.status()
	if r.st.Status == DAGCompleted {
		r.st.CompletedAt = now
	}
}

// details are the run's current details for the Temporal UI, as Markdown: its status, then
// every node in topological order with its status and, when it failed, why.
func (r *dagRun) details() string {
	var b strings.Builder
	b.WriteString("**" + r.st.Status + "** (workflow " + r.st.WorkflowID + ", version " + strconv.Itoa(r.st.Version) + ")")
	for i, id := range r.order {
		ns := r.nodes[i]
		b.WriteString("  \n" + id + ": " + ns.Status.String())
		if ns.Status == workflowpb.NodeStatus_FAILED && ns.Error != "" {
			b.WriteString(" — " + summary("%s", ns.Error))
		}
	}
	return b.String()
}

// status is the run's status from its nodes.
func (r *dagRun) status() string {
	all, failed := true, false
	for i := range r.nodes {
		switch r.nodes[i].Status {
		case workflowpb.NodeStatus_COMPLETED, workflowpb.NodeStatus_SKIPPED:
		case workflowpb.NodeStatus_FAILED:
			all, failed = false, true
		default:
			all = false
		}
	}
	switch {
	case all:
		return DAGCompleted
	case failed && r.inflight == 0:
		return DAGWaiting
	}
	return DAGRunning
}

// released reports whether node i's trigger let it run; for a SCHEDULE node it starts the
// durable timer to its next cron time once.
func (r *dagRun) released(ctx workflow.Context, i int, node *workflowpb.WorkflowNode, now time.Time) bool {
	ns := &r.nodes[i]
	switch node.GetTriggerType() {
	case workflowpb.TriggerType_MANUAL, workflowpb.TriggerType_EVENT:
		return ns.Released
	case workflowpb.TriggerType_SCHEDULE:
		if ns.Released {
			return true
		}
		if ns.DueAt.IsZero() {
			sched, err := dag.ParseSchedule(node)
			if err != nil {
				r.fail(ctx, i, now, "schedule: "+err.Error())
				return false
			}
			ns.DueAt = sched.Next(now)
		}
		if !ns.DueAt.After(now) {
			ns.Released = true
			return true
		}
		if due, ok := r.timers[i]; !ok || !due.Equal(ns.DueAt) {
			due := ns.DueAt
			r.timers[i] = due
			timer := workflow.NewTimerWithOptions(ctx, due.Sub(now), workflow.TimerOptions{
				Summary: summary("node %s's schedule %q: due %s", r.order[i], node.GetMetadata()[dag.MetaSchedule], due.Format(time.RFC3339))})
			workflow.Go(ctx, func(ctx workflow.Context) {
				if err := timer.Get(ctx, nil); err != nil {
					return
				}
				// A resume may have reset the node meanwhile: only its current time counts.
				if n := &r.nodes[i]; n.Status == workflowpb.NodeStatus_PENDING && n.DueAt.Equal(due) {
					n.Released = true
				}
				r.dirty = true
			})
		}
		return false
	}
	return true
}

// fail marks node i FAILED.
func (r *dagRun) fail(ctx workflow.Context, i int, now time.Time, reason string) {
	ns := &r.nodes[i]
	ns.Error, ns.CompletedAt = reason, now
	r.set(ctx, i, workflowpb.NodeStatus_FAILED, reason)
}

// DAGNodeScope is the scope of a node's task when its metadata names none: the resource
// "dag/<workflow_id>/<node_id>", which admission finds disjoint from every other node's.
// Runs before it used the free-text scope "dag:<workflow_id>/<node_id>", which admission's
// rules cannot analyse: sibling nodes on different agents shared words, scored 0.4 and went
// to HITL as a scope CONFLICT — a 100-wide fan-out waited on human decisions (or their
// timeouts) between nodes that touch nothing in common. The scope travels in the child's
// input, which replay does not compare, so recorded runs replay unchanged.
func DAGNodeScope(workflowID, nodeID string) string {
	return "resource:" + strconv.Quote("dag/"+workflowID+"/"+nodeID)
}

// dispatch starts node i's next attempt as a child TaskWorkflow.
func (r *dagRun) dispatch(ctx workflow.Context, i int, node *workflowpb.WorkflowNode, now time.Time) {
	ns := &r.nodes[i]
	id := r.order[i]
	md := node.GetMetadata()
	var priority int64
	if p, ok := md["priority"]; ok {
		var err error
		if priority, err = strconv.ParseInt(p, 10, 32); err != nil || priority < int64(protocol.MinPriority) || priority > int64(protocol.MaxPriority) {
			r.fail(ctx, i, now, fmt.Sprintf("validation_error: metadata priority %q is not an integer in %d .. %d (§7.1)", p, protocol.MinPriority, protocol.MaxPriority))
			return
		}
	}
	scope := md["scope"]
	if scope == "" {
		scope = DAGNodeScope(r.st.WorkflowID, id)
	}
	params, err := dag.Input(node, []byte(r.st.Data))
	if err != nil {
		r.fail(ctx, i, now, "input_mapping: "+err.Error())
		return
	}
	ns.Attempts++
	ns.Tries++
	taskID := DAGTaskID(r.st.WorkflowID, id, ns.Attempts)
	ns.StartedAt, ns.CompletedAt, ns.TaskID = now, time.Time{}, taskID
	r.set(ctx, i, workflowpb.NodeStatus_RUNNING, "")
	in := TaskInput{TaskID: taskID, AgentID: node.GetAgentId(), Priority: int32(priority), Params: params,
		ContentType: "application/json", Scope: scope, SubmittedAt: now, Revision: TaskRevisionCurrent}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: TaskWorkflowID(taskID),
		// A task is an ordinary task: if the run is terminated, the agent's work and the
		// task's own bookkeeping (its activity entry) still finish.
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(KindKey.ValueSet(KindTask), AgentIDKey.ValueSet(node.GetAgentId())),
		// The UI lists the children by these, not as a row of TaskWorkflow.
		StaticSummary: summary("DAG %s node %s on agent %s, attempt %d", r.st.WorkflowID, id, node.GetAgentId(), ns.Attempts),
		StaticDetails: dagNodeDetails(node, scope),
	})
	f := workflow.ExecuteChildWorkflow(cctx, TaskWorkflow, in)
	r.inflight++
	workflow.Go(ctx, func(ctx workflow.Context) {
		var s TaskStatus
		err := f.Get(ctx, &s)
		// A task that FAILED ends its run with an error carrying its status; recorded runs
		// completed with it. Both are the node's failure, with the same reason.
		if st, ok := TaskOutcome(s, err); ok {
			s, err = st, nil
		}
		r.inflight--
		r.done = append(r.done, dagDone{pos: i, taskID: taskID, status: s, err: err})
		r.dirty = true
	})
}

// dagNodeDetails are the static details of a node's task: its trigger, dependencies,
// mappings and scope, as Markdown (what the Temporal UI renders them as).
func dagNodeDetails(node *workflowpb.WorkflowNode, scope string) string {
	var b strings.Builder
	b.WriteString("**trigger** " + node.GetTriggerType().String() + "  \n**scope** `" + scope + "`")
	if d := node.GetDependencies(); len(d) > 0 {
		b.WriteString("  \n**after** " + strings.Join(d, ", "))
	}
	for _, m := range []struct {
		name string
		kv   map[string]string
	}{{"input", node.GetInputMapping()}, {"output", node.GetOutputMapping()}} {
		// Sorted: map order is random, and the details must not be.
		keys := slices.Sorted(maps.Keys(m.kv)) //workflowcheck:ignore
		for _, k := range keys {
			b.WriteString("  \n**" + m.name + "** " + k + " ← " + m.kv[k])
		}
	}
	return b.String()
}

// finish applies a finished attempt: output merged into workflow_data on COMPLETED; a retry
// or FAILED otherwise.
func (r *dagRun) finish(ctx workflow.Context, d dagDone) {
	ns := &r.nodes[d.pos]
	if ns.TaskID != d.taskID || ns.Status != workflowpb.NodeStatus_RUNNING {
		return // an attempt a resume has superseded
	}
	r.finished++
	now := workflow.Now(ctx)
	id := r.order[d.pos]
	node := r.def.GetNodes()[id]
	reason := ""
	switch {
	case d.err != nil:
		reason = "task " + d.taskID + ": " + d.err.Error()
	case d.status.State != TaskCompleted:
		reason = "task " + d.taskID + " " + d.status.State
		if d.status.Reason != "" {
			reason += ": " + d.status.Reason
		}
	default:
		out := dagOutput(d.status.Result)
		data, err := dag.ApplyOutput(node, []byte(r.st.Data), out)
		if err != nil {
			reason = "output_mapping: " + err.Error()
			break
		}
		stored := string(out)
		if len(out) > DAGLargeOutput {
			var acts *activities.Activities
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				StartToCloseTimeout: 30 * time.Second,
				RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
			})
			in := activities.DAGOutputInput{WorkflowID: r.st.WorkflowID, NodeID: id, Attempt: ns.Attempts, Content: out}
			if err := workflow.ExecuteLocalActivity(lctx, acts.StoreDAGOutput, in).Get(ctx, &stored); err != nil {
				reason = "storing the output: " + err.Error()
				break
			}
		}
		r.st.Data = string(data)
		ns.CompletedAt, ns.Output, ns.Error = now, stored, ""
		r.set(ctx, d.pos, workflowpb.NodeStatus_COMPLETED, "")
		return
	}
	retries, _ := strconv.Atoi(node.GetMetadata()["retries"])
	ns.Error = reason
	if ns.Tries <= retries {
		// Re-run with the next attempt's task id; the trigger that released it still holds.
		r.set(ctx, d.pos, workflowpb.NodeStatus_PENDING, fmt.Sprintf("retry %d of %d: %s", ns.Tries, retries, reason))
		workflow.GetLogger(ctx).Info("DAG node retried", "workflow_id", r.st.WorkflowID, "node_id", id, "tries", ns.Tries, "reason", reason)
		return
	}
	r.fail(ctx, d.pos, now, reason)
	workflow.GetLogger(ctx).Warn("DAG node failed", "workflow_id", r.st.WorkflowID, "node_id", id, "reason", reason)
}

// dagOutput is a task result as JSON: a result that is not JSON becomes a JSON string.
func dagOutput(result string) []byte {
	if result == "" {
		return []byte("null")
	}
	if json.Valid([]byte(result)) {
		return []byte(result)
	}
	// Encoding a string is deterministic; workflowcheck flags encoding/json only because its
	// reflection reaches runtime internals.
	//workflowcheck:ignore
	b, _ := json.Marshal(result) // a string always marshals
	return b
}

// continueSuggested reports whether the run should continue as new: Temporal suggests it,
// history passed DAGHistoryLimit, or the input's ContinueAsNewAfter was reached.
func (r *dagRun) continueSuggested(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > DAGHistoryLimit ||
		(r.in.ContinueAsNewAfter > 0 && r.finished >= r.in.ContinueAsNewAfter)
}

// setState upserts SW4RMDAGState when the status changed.
func (r *dagRun) setState(ctx workflow.Context) error {
	if r.st.Status == r.stateSet {
		return nil
	}
	r.stateSet = r.st.Status
	return workflow.UpsertTypedSearchAttributes(ctx, DAGStateKey.ValueSet(r.st.Status))
}

// snapshot is the run's state, with the node states by node_id.
func (r *dagRun) snapshot() DAGRunState {
	st := r.st
	st.Nodes = make(map[string]DAGNodeState, len(r.order))
	for i, id := range r.order {
		st.Nodes[id] = r.nodes[i]
	}
	return st
}
