package activities

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// ArtifactDAGNodeOutput is the artifact kind of a DAG node's output that was too large to
// keep in the run's state (§17.7, issue 17: large values are stored as artifacts and
// referenced).
const ArtifactDAGNodeOutput = "node-output"

// DAGNegotiationID is the artifacts' negotiation_id of a DAG run's stored outputs:
// "dag/<workflow_id>", the run's workflow ID.
func DAGNegotiationID(workflowID string) string { return "dag/" + workflowID }

// DAGArtifactVersion is the artifact version of one attempt's output: "<node_id>/<attempt>".
func DAGArtifactVersion(nodeID string, attempt int) string {
	return nodeID + "/" + strconv.Itoa(attempt)
}

// DAGOutputInput asks StoreDAGOutput to store a node's output.
type DAGOutputInput struct {
	// WorkflowID, NodeID and Attempt name the output (one per attempt, so a re-run after a
	// resume never collides with the earlier output).
	WorkflowID, NodeID string
	Attempt            int
	// Content is the output, JSON.
	Content []byte
}

// StoreDAGOutput stores a large node output as an artifact (NegotiationID
// DAGNegotiationID, Kind ArtifactDAGNodeOutput, Version DAGArtifactVersion) and returns its
// reference, "artifact:<negotiation_id>/<kind>/<version>". The DAG run calls it as a local
// activity, whose input is not written to history, so the output is recorded once (as the
// task's result) and not again. Idempotent: a retry finds the artifact already stored.
func (a *Activities) StoreDAGOutput(ctx context.Context, in DAGOutputInput) (string, error) {
	art := store.Artifact{NegotiationID: DAGNegotiationID(in.WorkflowID), Kind: ArtifactDAGNodeOutput,
		Version: DAGArtifactVersion(in.NodeID, in.Attempt), ContentType: "application/json", Content: in.Content}
	if err := a.Store.Artifacts().AppendArtifact(ctx, art); err != nil && !errors.Is(err, store.ErrDuplicateArtifact) {
		return "", fmt.Errorf("store output of node %s: %w", in.NodeID, err)
	}
	return DAGOutputRef(in.WorkflowID, in.NodeID, in.Attempt), nil
}

// DAGOutputRef is the reference a DAG run's state keeps in place of a stored output.
func DAGOutputRef(workflowID, nodeID string, attempt int) string {
	return "artifact:" + DAGNegotiationID(workflowID) + "/" + ArtifactDAGNodeOutput + "/" + DAGArtifactVersion(nodeID, attempt)
}

// DAGTransition is one node's change of status in a DAG run (§17.7 node status transitions).
type DAGTransition struct {
	// NodeID is the node; From and To its status before and after, by NodeStatus name.
	NodeID, From, To string
	// At is when the run made the change (workflow time).
	At time.Time
	// TaskID is the attempt's task, for RUNNING and what ends it.
	TaskID string `json:",omitempty"`
	// Reason says why: the error of a FAILED node, the SKIPPED dependency or the skip_if
	// that bypassed a node, a retry or a resume.
	Reason string `json:",omitempty"`
}

// DAGTransitionsInput asks RecordDAGTransitions to audit the transitions of one step.
type DAGTransitionsInput struct {
	// WorkflowID names the definition the run executes.
	WorkflowID string
	// Transitions are in the order the run made them.
	Transitions []DAGTransition
}

// RecordDAGTransitions writes each transition to the audit log as "dag.node.<status>"
// (§19: every state transition, with its time, correlation id and actor), on the run's
// correlation id. The run batches one step's transitions into one call, a local activity,
// so a wide fan-out costs one call per step, not one per node. The sink queues the rows and
// never drops them, so the call does not wait for the store.
func (a *Activities) RecordDAGTransitions(ctx context.Context, in DAGTransitionsInput) error {
	corr := dag.RunCorrelationPrefix + in.WorkflowID
	for _, t := range in.Transitions {
		details := map[string]any{"workflow_id": in.WorkflowID, "node_id": t.NodeID, "from": t.From, "to": t.To,
			"at": t.At.UTC().Format(time.RFC3339Nano)}
		if t.TaskID != "" {
			details["task_id"] = t.TaskID
		}
		if t.Reason != "" {
			details["reason"] = t.Reason
		}
		a.Sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: protocol.SchedulerID, Type: "dag.node." + strings.ToLower(t.To), Details: details})
	}
	return nil
}
