package test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/dag/pipeline"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
)

// TestDAGExample: on both stores, the DAG example (examples/dag, `make example-dag`) does what
// its README says: lint fails on its first run and the run waits with package and deploy not
// run; after the fix, the resume from lint completes the run, data flows from build to deploy
// through workflow_data, lint ran twice and every other node exactly once.
func TestDAGExample(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			var out bytes.Buffer
			res, err := pipeline.Run(t.Context(), sys.app.GRPCAddr(), pipeline.Options{Out: &out, Wait: time.Minute})
			require.NoError(t, err, "example output:\n%s", out.String())

			assert.Equal(t, 1, res.Version)
			assert.Equal(t, res.Agents[pipeline.NodeUnitTests], res.Agents[pipeline.NodeLint], "one checker serves both checks")
			assert.Len(t, map[string]bool{res.Agents[pipeline.NodeBuild]: true, res.Agents[pipeline.NodeLint]: true,
				res.Agents[pipeline.NodePackage]: true, res.Agents[pipeline.NodeDeploy]: true}, 4, "four agents")

			w := res.Waiting.GetNodeStates()
			assert.Equal(t, dag.RunWaiting, dag.RunStatus(res.Waiting))
			assert.Equal(t, workflowpb.NodeStatus_COMPLETED, w[pipeline.NodeBuild].GetStatus())
			assert.Equal(t, workflowpb.NodeStatus_FAILED, w[pipeline.NodeLint].GetStatus())
			assert.Contains(t, w[pipeline.NodeLint].GetError(), "exported function Serve has no doc comment", "the agent's reason reaches the node")
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
		})
	}
}
