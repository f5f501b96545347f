package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Metadata of the workflow service (docs/dag.md). CreateWorkflowResponse has no field for
// the version stored or for warnings, and the canonical contract cannot change (§5.1), so
// they travel as response headers.
const (
	// LateBindingMetadataKey is the WorkflowDefinition metadata key that, set to "true",
	// lets a definition name agents that are not registered yet: they must be registered
	// by the time their node runs. Without it every node's agent must be registered when
	// the definition is created.
	LateBindingMetadataKey = "late_binding"
)

// maxListedAgents bounds how many unregistered agents a refusal names.
const maxListedAgents = 20

// workflowService serves sw4rm.workflow.WorkflowService (§17.7): CreateWorkflow stores a
// definition, and StartWorkflow, GetWorkflowState and ResumeWorkflow drive its run, the
// workflow dag/<workflow_id>.
type workflowService struct {
	workflowpb.UnimplementedWorkflowServiceServer
	s *Server
}

// marshalDefinition is the stored form of a definition: deterministic, so that the same
// definition always has the same bytes and a retry is recognised (store.PutDefinition), and
// without created_at, which the store's CreatedAt of each version replaces.
func marshalDefinition(def *workflowpb.WorkflowDefinition) ([]byte, error) {
	c := proto.Clone(def).(*workflowpb.WorkflowDefinition)
	c.CreatedAt = nil
	return proto.MarshalOptions{Deterministic: true}.Marshal(c)
}

// CreateWorkflow validates a definition before anything is stored (§17.7: a DAG, no cycles;
// see protocol/dag), checks that every node's agent is registered unless the definition asks
// for late binding, and stores it as the workflow_id's next version, created by the proven
// caller. A definition byte-identical to the latest version answers that version and stores
// nothing. The version and any warnings come back in the sw4rm-workflow-version and
// sw4rm-workflow-warnings headers.
func (w *workflowService) CreateWorkflow(ctx context.Context, req *workflowpb.CreateWorkflowRequest) (*workflowpb.CreateWorkflowResponse, error) {
	def := req.GetDefinition()
	res, err := dag.ValidateCreate(def)
	if err != nil {
		return nil, err // a *dag.CycleError (workflow_cycle_detected) or a *protocol.Error (validation_error)
	}
	// A new version of another principal's workflow is a change to its work (access.go).
	if err := w.s.decideDAG(ctx, def.GetWorkflowId(), "create a version of"); err != nil {
		return nil, err
	}
	warnings, err := w.lateBinding(ctx, def, slices.Clone(res.Warnings))
	if err != nil {
		return nil, err
	}
	version, err := w.store(ctx, def, res, warnings)
	if err != nil {
		return nil, err
	}
	md := metadata.Pairs(wire.WorkflowVersionHeader, strconv.Itoa(version))
	if len(warnings) > 0 {
		md.Append(wire.WorkflowWarningsHeader, warnings...)
	}
	_ = grpc.SetHeader(ctx, md)
	return &workflowpb.CreateWorkflowResponse{WorkflowId: def.GetWorkflowId(), Success: true}, nil
}

// lateBinding refuses a definition naming agents that are not registered, unless its
// metadata asks for late binding; then it adds a warning naming them to warnings.
func (w *workflowService) lateBinding(ctx context.Context, def *workflowpb.WorkflowDefinition, warnings []string) ([]string, error) {
	missing, err := w.unregisteredAgents(ctx, def)
	if err != nil || len(missing) == 0 {
		return warnings, err
	}
	if def.GetMetadata()[LateBindingMetadataKey] != "true" {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"nodes name agents that are not registered: %s; register them first, or set the definition's metadata %s to \"true\" to bind them when their nodes run",
			listAgents(missing), LateBindingMetadataKey)
	}
	return append(warnings, "late binding: agents not registered yet: "+listAgents(missing)), nil
}

// store stores a validated definition as its workflow_id's next version, created by the
// proven caller, and answers the version; a byte-identical retry stores nothing new.
func (w *workflowService) store(ctx context.Context, def *workflowpb.WorkflowDefinition, res dag.Result, warnings []string) (int, error) {
	body, err := marshalDefinition(def)
	if err != nil {
		return 0, internalf("marshal the definition: %v", err)
	}
	id := def.GetWorkflowId()
	// The latest version is read first only to tell a retry from a change for the audit log:
	// PutDefinition itself decides, under its lock, which version the bytes get.
	prev, err := w.s.store.Definitions().GetDefinition(ctx, id, 0)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, failed("read the latest definition", err)
	}
	retry := err == nil && string(prev.Definition) == string(body)
	rec, err := w.s.store.Definitions().PutDefinition(ctx, id, body, auth.FromContext(ctx).String())
	if err != nil {
		return 0, failed("store the definition", err)
	}
	if !retry {
		w.s.sink.Record(ctx, audit.Event{Actor: auth.FromContext(ctx).String(), Type: "workflow.definition_created",
			Details: map[string]any{"workflow_id": id, "version": rec.Version, "nodes": len(def.GetNodes()),
				"roots": res.Roots, "warnings": warnings}})
	}
	return rec.Version, nil
}

// unregisteredAgents returns the agents the definition's nodes name that the registry does
// not know, sorted; each distinct agent is looked up once.
func (w *workflowService) unregisteredAgents(ctx context.Context, def *workflowpb.WorkflowDefinition) ([]string, error) {
	agents := make([]string, 0, len(def.GetNodes()))
	for _, n := range def.GetNodes() {
		agents = append(agents, n.GetAgentId())
	}
	slices.Sort(agents)
	var missing []string
	for _, a := range slices.Compact(agents) {
		_, err := w.s.store.Registry().GetAgent(ctx, a)
		switch {
		case errors.Is(err, store.ErrNotFound):
			missing = append(missing, a)
		case err != nil:
			return nil, failed("look up agent "+a, err)
		}
	}
	return missing, nil
}

// listAgents names agents for a message, at most maxListedAgents of them.
func listAgents(agents []string) string {
	if len(agents) <= maxListedAgents {
		return strings.Join(agents, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(agents[:maxListedAgents], ", "), len(agents)-maxListedAgents)
}
