package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// TestDAGDefinitions covers CreateWorkflow (§17.7) over gRPC on both stores: a diamond is
// validated and stored as version 1, an identical retry answers version 1 and a change is
// version 2; a cycle is refused with workflow_cycle_detected naming the cycle and the
// VALIDATION_ERROR trailer; an unregistered agent is refused unless the definition asks for
// late binding; `sw4rm dag show` draws what was stored; a run refuses bad workflow_data.
func TestDAGDefinitions(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			builder, tester, linter, packager := dialAgent(t, sys, "builder"), dialAgent(t, sys, "tester"),
				dialAgent(t, sys, "linter"), dialAgent(t, sys, "packager")
			conn := dialRaw(t, sys)
			wf := workflowpb.NewWorkflowServiceClient(conn)

			// A diamond: build → {test, lint} → package.
			id := uniq(t, "pipeline")
			diamond := func() *dag.Builder {
				b := dag.New(id)
				b.Node("build", builder.ID()).Output("artifact", "/build/artifact")
				b.Node("test", tester.ID()).After("build").Input("artifact", "/build/artifact").Output("report", "/test/report")
				b.Node("lint", linter.ID()).After("build").Input("artifact", "/build/artifact").Output("report", "/lint/report")
				b.Node("package", packager.ID()).After("test", "lint")
				return b
			}
			def, err := diamond().Build()
			require.NoError(t, err)
			created, err := dag.Create(ctx, builder.Conn(), def)
			require.NoError(t, err)
			assert.Equal(t, dag.Created{WorkflowID: id, Version: 1}, created)
			created, err = dag.Create(ctx, builder.Conn(), def)
			require.NoError(t, err)
			assert.Equal(t, 1, created.Version, "an identical retry answers the stored version")
			changed, err := diamond().Meta("owner", "release-team").Build()
			require.NoError(t, err)
			created, err = dag.Create(ctx, builder.Conn(), changed)
			require.NoError(t, err)
			assert.Equal(t, 2, created.Version)
			recs, err := sys.app.Store().Definitions().ListDefinitions(ctx, id)
			require.NoError(t, err)
			require.Len(t, recs, 2)
			assert.Equal(t, []int{1, 2}, []int{recs[0].Version, recs[1].Version})
			require.Eventually(t, func() bool { // audit rows are written asynchronously
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{TypePrefix: "workflow.definition_created"})
				n := 0
				for _, e := range evs {
					if strings.Contains(string(e.Details), id) {
						n++
					}
				}
				return err == nil && n == 2
			}, 5*time.Second, 10*time.Millisecond, "one audit row per stored version")

			// A cycle names its nodes in order; nothing is stored.
			cycID := uniq(t, "cycle")
			cyc := &workflowpb.WorkflowDefinition{WorkflowId: cycID, Nodes: map[string]*workflowpb.WorkflowNode{
				"start":  {NodeId: "start", AgentId: builder.ID()},
				"plan":   {NodeId: "plan", AgentId: builder.ID(), Dependencies: []string{"start", "review"}},
				"code":   {NodeId: "code", AgentId: tester.ID(), Dependencies: []string{"plan"}},
				"review": {NodeId: "review", AgentId: linter.ID(), Dependencies: []string{"code"}},
			}}
			var trailer metadata.MD
			_, err = wf.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: cyc}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			msg := status.Convert(err).Message()
			assert.True(t, strings.HasPrefix(msg, "workflow_cycle_detected: "), msg)
			for _, n := range []string{"plan", "code", "review"} {
				assert.Contains(t, msg, n)
			}
			assert.NotContains(t, msg, "start")
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))
			// §17.7's own code, which ErrorCode lacks, in a trailer and a structured detail.
			assert.Equal(t, []string{"workflow_cycle_detected"}, trailer.Get(wire.WorkflowErrorCodeTrailer))
			var info *errdetails.ErrorInfo
			for _, d := range status.Convert(err).Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			require.NotNil(t, info, "an ErrorInfo detail")
			assert.Equal(t, "WORKFLOW_CYCLE_DETECTED", info.GetReason())
			assert.Equal(t, "workflow_cycle_detected", info.GetMetadata()["error_code"])
			assert.Equal(t, "code,review,plan,code", info.GetMetadata()["cycle"])
			_, err = sys.app.Store().Definitions().GetDefinition(ctx, cycID, 0)
			require.ErrorIs(t, err, store.ErrNotFound)

			// An agent nobody registered is refused, naming it …
			ghost := uniq(t, "ghost")
			lateID := uniq(t, "late")
			late := dag.New(lateID)
			late.Node("build", builder.ID())
			late.Node("deploy", ghost).After("build")
			lateDef, err := late.Build()
			require.NoError(t, err)
			_, err = wf.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: lateDef}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Regexp(t, "^validation_error: .*not registered: "+ghost, status.Convert(err).Message())
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))
			// … unless the definition binds it late, which is accepted with a warning.
			lateDef, err = late.LateBinding().Build()
			require.NoError(t, err)
			created, err = dag.Create(ctx, conn, lateDef)
			require.NoError(t, err)
			assert.Equal(t, 1, created.Version)
			require.Len(t, created.Warnings, 1)
			assert.Contains(t, created.Warnings[0], ghost)

			// The CLI draws what was stored: the latest version, or one named.
			out, err := runCLIArgs(t, sys, "", "dag", "show", id, "--server", sys.app.GRPCAddr())
			require.NoError(t, err, out)
			for _, n := range []string{"build", "test", "lint", "package", packager.ID()} {
				assert.Contains(t, out, n)
			}
			out, err = runCLIArgs(t, sys, "", "dag", "show", id, "--version", "1", "--format", "dot", "--server", sys.app.GRPCAddr())
			require.NoError(t, err, out)
			assert.Contains(t, out, "digraph")
			assert.Contains(t, out, "package")
			out, err = runCLIArgs(t, sys, "", "dag", "show", id, "--version", "3", "--server", sys.app.GRPCAddr())
			require.Error(t, err)
			assert.Contains(t, out, "no definition version 3")

			// Bad workflow_data is refused before anything starts.
			_, err = wf.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id, WorkflowData: "[1,2]"}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))
		})
	}
}
