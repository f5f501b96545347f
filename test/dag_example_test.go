package test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/dag/pipeline"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestDAGExample: on both stores, the DAG example (examples/dag, `make example-dag`) ends by
// itself, well within its deadline, and does what its README says: lint fails on its first
// run on its own terms — the node's error is the checker's validation_error and reason, not
// internal_error — and the run waits with package and deploy not run; after the fix, the
// resume from lint completes the run, data flows from build to deploy through workflow_data,
// lint ran twice and every other node exactly once. It cleans up: its four agents are
// deregistered with their lifecycles ended, and it leaves no dead letter — the failed lint is
// the task's outcome, not a message nobody could take.
func TestDAGExample(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			// The deadline is what would end a run that hangs.
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			res, err := pipeline.Run(ctx, sys.app.GRPCAddr(), pipeline.Options{Out: &out, Wait: time.Minute})
			require.NoError(t, err, "example output:\n%s", out.String())
			require.NoError(t, ctx.Err(), "the example ends by itself")

			assert.Equal(t, 1, res.Version)
			assert.Equal(t, res.Agents[pipeline.NodeUnitTests], res.Agents[pipeline.NodeLint], "one checker serves both checks")
			assert.Len(t, map[string]bool{res.Agents[pipeline.NodeBuild]: true, res.Agents[pipeline.NodeLint]: true,
				res.Agents[pipeline.NodePackage]: true, res.Agents[pipeline.NodeDeploy]: true}, 4, "four agents")

			w := res.Waiting.GetNodeStates()
			assert.Equal(t, dag.RunWaiting, dag.RunStatus(res.Waiting))
			assert.Equal(t, workflowpb.NodeStatus_COMPLETED, w[pipeline.NodeBuild].GetStatus())
			assert.Equal(t, workflowpb.NodeStatus_FAILED, w[pipeline.NodeLint].GetStatus())
			assert.Equal(t, "task dag-"+res.WorkflowID+"-lint-1 FAILED: validation_error: 1 finding: cmd/shop/main.go:42: exported function Serve has no doc comment",
				w[pipeline.NodeLint].GetError(), "the checker's code and reason reach the node")
			assert.Contains(t, out.String(), "FAILED    "+w[pipeline.NodeLint].GetError(), "the driver prints the node's error")
			assert.Equal(t, workflowpb.NodeStatus_PENDING, w[pipeline.NodePackage].GetStatus(), "a failed node's dependents do not run")
			assert.Equal(t, workflowpb.NodeStatus_PENDING, w[pipeline.NodeDeploy].GetStatus())
			assert.Contains(t, out.String(), `lint<br/>agent: `+res.Agents[pipeline.NodeLint]+`<br/>FAILED"]:::failed`, "the waiting run's picture")

			assert.Equal(t, dag.RunCompleted, dag.RunStatus(res.Final))
			for _, n := range pipeline.Nodes {
				assert.Equal(t, workflowpb.NodeStatus_COMPLETED, res.Final.GetNodeStates()[n].GetStatus(), n)
			}
			assert.Equal(t, map[string]int{pipeline.NodeBuild: 1, pipeline.NodeUnitTests: 1, pipeline.NodeLint: 2,
				pipeline.NodePackage: 1, pipeline.NodeDeploy: 1}, res.Runs, "completed nodes ran exactly once")

			var data struct {
				Artifact pipeline.Artifact `json:"artifact"`
				Checks   struct {
					UnitTests pipeline.TestReport `json:"unit-tests"`
					Lint      pipeline.LintReport `json:"lint"`
				} `json:"checks"`
				Package    pipeline.Package    `json:"package"`
				Deployment pipeline.Deployment `json:"deployment"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.Final.GetWorkflowData()), &data))
			assert.Equal(t, "shop-1.4.2.tar.gz", data.Artifact.Name, "build's output mapped to /artifact")
			assert.Equal(t, data.Artifact.Name, data.Checks.UnitTests.Artifact, "unit-tests read build's artifact")
			assert.Equal(t, data.Artifact.Name, data.Checks.Lint.Artifact, "lint read build's artifact")
			assert.Empty(t, data.Checks.Lint.Findings)
			assert.Equal(t, "registry.example.com/acme/shop:1.4.2", data.Package.Image, "package read the version and both reports")
			assert.Equal(t, pipeline.Deployment{Environment: "staging", Image: data.Package.Image, URL: "https://staging.shop.example.com"},
				data.Deployment, "deploy read /package and /environment")

			// The failed lint is its task's outcome, with the checker's code and reason.
			// Its workflow failed (the Temporal UI shows it failed), with the status as details.
			var lint workflows.TaskStatus
			lintErr := sys.app.Temporal().GetWorkflow(ctx, workflows.TaskWorkflowID("dag-"+res.WorkflowID+"-lint-1"), "").Get(ctx, &lint)
			require.Error(t, lintErr, "a FAILED task fails its workflow")
			lint, ok := workflows.TaskOutcome(lint, lintErr)
			require.True(t, ok, "%v", lintErr)
			assert.Equal(t, workflows.TaskFailed, lint.State)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, lint.ErrorCode)
			assert.Equal(t, "validation_error: 1 finding: cmd/shop/main.go:42: exported function Serve has no doc comment", lint.Reason)

			// The cleanup, and no dead letter.
			assert.Equal(t, []string{res.Agents[pipeline.NodeBuild], res.Agents[pipeline.NodeLint], res.Agents[pipeline.NodePackage],
				res.Agents[pipeline.NodeDeploy]}, res.Registered)
			assertNoDeadLetters(t, assertExampleCleanedUp(ctx, t, sys, res.Registered, res.Deregistered))
		})
	}
}
