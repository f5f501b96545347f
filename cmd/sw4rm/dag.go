package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
)

// newDAGCmd builds `sw4rm dag show`: the graph of a stored DAG workflow definition (§17.7) as
// Mermaid or DOT, read through the DefinitionService extension (the canonical WorkflowService
// has no call that reads a definition back), and `sw4rm dag runs`, the runs listed through
// the DirectoryService extension. With authentication on, --token must be an operator's
// (docs/security.md).
func newDAGCmd() *cobra.Command {
	var of operatorFlags
	cmd := &cobra.Command{
		Use:   "dag",
		Short: "Look at DAG workflows (§17.7)",
	}
	var (
		version int32
		format  string
	)
	show := &cobra.Command{
		Use:   "show <workflow_id>|dag/<workflow_id> [--version N] [--format mermaid|dot]",
		Short: "Draw a workflow and its run's node states as a Mermaid flowchart or a Graphviz digraph",
		Long: "Draw a workflow's stored definition, the latest version unless --version names one, " +
			"with the node states of its run when it has one (open or closed). " +
			"The run's Temporal workflow ID, dag/<workflow_id> as the Temporal UI shows it, is accepted too. " +
			"Mermaid renders on GitHub and in docs; pipe DOT into `dot -Tsvg`.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			draw, err := drawFunc(format)
			if err != nil {
				return err
			}
			if version < 0 {
				return fmt.Errorf("--version must be 1 or more (0 or absent: the latest), not %d", version)
			}
			// The Temporal UI names a run by its workflow ID, dag/<workflow_id>
			// (workflows.DAGWorkflowID); the definition and the run are stored under the bare id.
			workflowID := dagIDs.bare(args[0])
			conn, ctx, err := of.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			resp, err := workflowdefpb.NewDefinitionServiceClient(conn).GetDefinition(ctx,
				&workflowdefpb.GetDefinitionRequest{WorkflowId: workflowID, Version: version})
			if err != nil {
				return err
			}
			// With a run, its node states colour the picture; without one, the bare definition.
			var states map[string]workflowpb.NodeStatus
			if run, err := workflowpb.NewWorkflowServiceClient(conn).GetWorkflowState(ctx,
				&workflowpb.GetWorkflowStateRequest{WorkflowId: workflowID}); err == nil && version == 0 {
				states = map[string]workflowpb.NodeStatus{}
				for id, n := range run.GetState().GetNodeStates() {
					states[id] = n.GetStatus()
				}
			} else if c := status.Code(err); err != nil && c != codes.NotFound && c != codes.Unimplemented {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), draw(resp.GetDefinition(), states))
			return err
		},
	}
	show.Flags().Int32Var(&version, "version", 0, "the definition's version; 0 means the latest")
	show.Flags().StringVar(&format, "format", "mermaid", "mermaid or dot")
	of.register(cmd)
	cmd.AddCommand(show, newDAGRunsCmd(directoryClient(&of)))
	return cmd
}

// drawFunc returns the drawing of a --format.
func drawFunc(format string) (func(*workflowpb.WorkflowDefinition, map[string]workflowpb.NodeStatus) string, error) {
	switch format {
	case "mermaid":
		return dag.Mermaid, nil
	case "dot":
		return dag.DOT, nil
	}
	return nil, fmt.Errorf("--format %q: want mermaid or dot", format)
}
