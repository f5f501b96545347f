package activities

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
