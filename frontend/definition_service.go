package frontend

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// definitionService serves the extension sw4rmext.workflow.v1.DefinitionService: reading
// the definitions CreateWorkflow stored (the canonical service has no such call, §5.1).
type definitionService struct {
	workflowdefpb.UnimplementedDefinitionServiceServer
	s *Server
}

// GetDefinition returns one stored version of a workflow's definition, the latest when
// version is 0, with its created_at set to when that version was stored.
func (d *definitionService) GetDefinition(ctx context.Context, req *workflowdefpb.GetDefinitionRequest) (*workflowdefpb.GetDefinitionResponse, error) {
	id, version := req.GetWorkflowId(), int(req.GetVersion())
	if perr := dag.ValidateDefinitionVersion(id, version); perr != nil {
		return nil, perr
	}
	if err := d.s.decideDAG(ctx, id, "read"); err != nil {
		return nil, err
	}
	rec, latest, err := d.versions(ctx, id, version)
	if err != nil {
		return nil, err
	}
	def := &workflowpb.WorkflowDefinition{}
	if err := proto.Unmarshal(rec.Definition, def); err != nil {
		return nil, internalf("stored definition %q version %d does not decode: %v", id, rec.Version, err)
	}
	def.CreatedAt = timestamppb.New(rec.CreatedAt)
	return &workflowdefpb.GetDefinitionResponse{
		Definition: def, Version: int32(rec.Version), LatestVersion: int32(latest.Version),
		CreatedAt: timestamppb.New(rec.CreatedAt), CreatedBy: rec.CreatedBy,
	}, nil
}

// versions reads version of workflow id's definition (0: the latest) and the latest one.
func (d *definitionService) versions(ctx context.Context, id string, version int) (rec, latest store.WorkflowDefinitionRecord, err error) {
	defs := d.s.store.Definitions()
	rec, err = defs.GetDefinition(ctx, id, version)
	if errors.Is(err, store.ErrNotFound) {
		if version == 0 {
			return rec, rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "workflow %q has no definition (CreateWorkflow stores one)", id)
		}
		return rec, rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "workflow %q has no definition version %d", id, version)
	}
	if err != nil {
		return rec, rec, failed("read the definition", err)
	}
	if version == 0 {
		return rec, rec, nil
	}
	if latest, err = defs.GetDefinition(ctx, id, 0); err != nil {
		return rec, latest, failed("read the latest definition", err)
	}
	return rec, latest, nil
}
