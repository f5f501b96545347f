// Package dag is the Go SDK of DAG workflows (§17.7): a fluent builder of
// workflowpb.WorkflowDefinition, Create, which registers a definition through the
// canonical WorkflowService and reports the version it was stored as, and RunStatus, which
// reads a run's status from its WorkflowState (docs/dag.md).
//
//	def, err := dag.New("release").
//		Node("build", "builder").Output("artifact", "/build/artifact").
//		Node("test", "tester").After("build").Input("artifact", "/build/artifact").
//		Node("lint", "linter").After("build").
//		Node("package", "packager").After("test", "lint").
//		Build()
//	created, err := dag.Create(ctx, agent.ClientConn(), def)
//
// Mappings use JSON Pointers (RFC 6901) into the run's workflow_data: Input(key, pointer)
// gives the node's input key the value at pointer; Output(key, pointer) writes the node's
// output key to pointer.
package dag

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	pdag "github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The run's own status, which GetWorkflowState answers in WorkflowState.metadata because the
// canonical WorkflowState has no field for it (docs/dag.md, "The RPCs of a run").
const (
	// RunRunning: nodes run, or wait for their dependencies or triggers.
	RunRunning = "RUNNING"
	// RunWaiting: a node failed (after its retries) and nothing runs; the run stays open
	// until ResumeWorkflow re-runs a node.
	RunWaiting = "WAITING"
	// RunCompleted: every node completed or was skipped; the run closed.
	RunCompleted = "COMPLETED"
)

// RunStatus returns the run's status in st (RunRunning, RunWaiting or RunCompleted), or ""
// when st carries none.
func RunStatus(st *workflowpb.WorkflowState) string { return st.GetMetadata()[wire.RunStatusKey] }

// Builder builds a WorkflowDefinition. Its methods record the first misuse (a node defined
// twice, an empty id) and Build reports it, so a chain needs one error check.
type Builder struct {
	def *workflowpb.WorkflowDefinition
	err error
}

// New starts a definition of workflowID.
func New(workflowID string) *Builder {
	return &Builder{def: &workflowpb.WorkflowDefinition{WorkflowId: workflowID,
		Nodes: map[string]*workflowpb.WorkflowNode{}}}
}

// Meta sets a metadata entry of the definition.
func (b *Builder) Meta(key, value string) *Builder {
	if b.def.Metadata == nil {
		b.def.Metadata = map[string]string{}
	}
	b.def.Metadata[key] = value
	return b
}

// LateBinding lets the definition's nodes name agents that are not registered yet (they must
// be by the time their node runs).
func (b *Builder) LateBinding() *Builder { return b.Meta(pdag.MetaLateBinding, "true") }

// Node adds a node run by agentID, triggered by its dependencies (DEPENDENCY) unless Trigger
// says otherwise, and returns it for its settings.
func (b *Builder) Node(id, agentID string) *NodeBuilder {
	n := &workflowpb.WorkflowNode{NodeId: id, AgentId: agentID, TriggerType: workflowpb.TriggerType_DEPENDENCY}
	switch {
	case b.err != nil:
	case id == "":
		b.err = errors.New("dag: a node needs an id")
	case b.def.Nodes[id] != nil:
		b.err = fmt.Errorf("dag: node %q is defined twice", id)
	default:
		b.def.Nodes[id] = n
	}
	return &NodeBuilder{b: b, n: n}
}

// Build returns the definition after validating it as the server will (protocol/dag): a
// cycle is a *pdag.CycleError, other faults a validation_error. Agent registration is the
// server's to check.
func (b *Builder) Build() (*workflowpb.WorkflowDefinition, error) {
	if b.err != nil {
		return nil, b.err
	}
	if _, err := pdag.Validate(b.def); err != nil {
		return nil, err
	}
	return b.def, nil
}

// NodeBuilder sets one node; its Node and Build continue with the definition.
type NodeBuilder struct {
	b *Builder
	n *workflowpb.WorkflowNode
}

// After makes the node depend on deps: it runs once all of them completed.
func (nb *NodeBuilder) After(deps ...string) *NodeBuilder {
	nb.n.Dependencies = append(nb.n.Dependencies, deps...)
	return nb
}

// Trigger sets how the node is activated (§17.7): DEPENDENCY (the default), MANUAL, EVENT or
// SCHEDULE (with a cron expression in the node's metadata "schedule").
func (nb *NodeBuilder) Trigger(t workflowpb.TriggerType) *NodeBuilder {
	nb.n.TriggerType = t
	return nb
}

// Input gives the node's input key the value at pointer (a JSON Pointer) in workflow_data.
func (nb *NodeBuilder) Input(key, pointer string) *NodeBuilder {
	if nb.n.InputMapping == nil {
		nb.n.InputMapping = map[string]string{}
	}
	nb.n.InputMapping[key] = pointer
	return nb
}

// Output writes the node's output key to pointer (a JSON Pointer) in workflow_data.
func (nb *NodeBuilder) Output(key, pointer string) *NodeBuilder {
	if nb.n.OutputMapping == nil {
		nb.n.OutputMapping = map[string]string{}
	}
	nb.n.OutputMapping[key] = pointer
	return nb
}

// Meta sets a metadata entry of the node (e.g. "schedule", "skip_if", "priority").
func (nb *NodeBuilder) Meta(key, value string) *NodeBuilder {
	if nb.n.Metadata == nil {
		nb.n.Metadata = map[string]string{}
	}
	nb.n.Metadata[key] = value
	return nb
}

// SkipIf skips the node when the value at pointer in workflow_data is JSON true when its
// turn comes (metadata "skip_if").
func (nb *NodeBuilder) SkipIf(pointer string) *NodeBuilder { return nb.Meta(pdag.MetaSkipIf, pointer) }

// RunAfterSkipped lets a SKIPPED dependency count as satisfied for the node (metadata
// "after_skipped": "run"); by default such a node is SKIPPED too (§17.7).
func (nb *NodeBuilder) RunAfterSkipped() *NodeBuilder {
	return nb.Meta(pdag.MetaAfterSkipped, pdag.AfterSkippedRun)
}

// Node adds the next node to the definition (see Builder.Node).
func (nb *NodeBuilder) Node(id, agentID string) *NodeBuilder { return nb.b.Node(id, agentID) }

// Build builds the definition (see Builder.Build).
func (nb *NodeBuilder) Build() (*workflowpb.WorkflowDefinition, error) { return nb.b.Build() }

// Created is what CreateWorkflow answered.
type Created struct {
	// WorkflowID is the definition's workflow_id.
	WorkflowID string
	// Version is the version it was stored as; a retry of the same definition answers the
	// version stored before.
	Version int
	// Warnings are what validation warned about (unreachable nodes, late-bound agents).
	Warnings []string
}

// Create registers def through WorkflowService.CreateWorkflow on conn (an agent's
// connection signs the call when the agent signs). A refusal is the server's gRPC status:
// InvalidArgument with "workflow_cycle_detected: …" or "validation_error: …".
func Create(ctx context.Context, conn grpc.ClientConnInterface, def *workflowpb.WorkflowDefinition, opts ...grpc.CallOption) (Created, error) {
	var header metadata.MD
	resp, err := workflowpb.NewWorkflowServiceClient(conn).CreateWorkflow(ctx,
		&workflowpb.CreateWorkflowRequest{Definition: def}, append(opts, grpc.Header(&header))...)
	if err != nil {
		return Created{}, err
	}
	if !resp.GetSuccess() {
		return Created{}, fmt.Errorf("dag: create workflow %q: %s", def.GetWorkflowId(), resp.GetError())
	}
	c := Created{WorkflowID: resp.GetWorkflowId(), Warnings: header.Get(wire.WorkflowWarningsHeader)}
	if v := header.Get(wire.WorkflowVersionHeader); len(v) > 0 {
		if c.Version, err = strconv.Atoi(v[0]); err != nil {
			return c, fmt.Errorf("dag: create workflow %q: bad %s header %q", def.GetWorkflowId(), wire.WorkflowVersionHeader, v[0])
		}
	}
	return c, nil
}
