package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestSummaries: a run's static summary says what it is, on one line of bounded size.
func TestSummaries(t *testing.T) {
	assert.Equal(t, "task t1 on agent a, priority -3", workflows.TaskSummary(workflows.TaskInput{TaskID: "t1", AgentID: "a", Priority: -3}))
	in := workflows.ToolCallInput{Caller: "agent:a", Request: tools.Request{ToolName: "fs.read", ProviderID: "builtin",
		Policy: tool.Policy{Privilege: tool.PrivilegeMinimal}}}
	assert.Equal(t, "tool fs.read of provider builtin, privilege MINIMAL, called by agent:a", workflows.ToolSummary(in))
	long := workflows.TaskSummary(workflows.TaskInput{TaskID: strings.Repeat("é", 300), AgentID: "a\nb"})
	assert.LessOrEqual(t, len(long), 200)
	assert.True(t, strings.HasSuffix(long, "…"), long)
	assert.NotContains(t, workflows.TaskSummary(workflows.TaskInput{TaskID: "t", AgentID: "a\nb"}), "\n")
	assert.Equal(t, "DAG run of workflow wf (§17.7)", workflows.DAGStartOptions("wf", "q").StaticSummary)
	assert.Equal(t, "task t1 on agent a, priority 0", workflows.TaskStartOptions(workflows.TaskInput{TaskID: "t1", AgentID: "a"}, "q").StaticSummary)
}

// TestDAGCurrentDetails: a DAG run's current details, which the Temporal UI shows, list its
// status and each node's, with the reason of a failure.
func TestDAGCurrentDetails(t *testing.T) {
	h := newDAGHarness(t)
	h.behave = failUntilFixed("b")
	var details string
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
		require.NoError(t, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(t, v.Get(&md))
		details = md.GetCurrentDetails()
		h.env.CancelWorkflow()
	}, time.Hour)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Version: 2,
		Definition: dagDef(t, dagNode("a"), dagNode("b", "a"), dagNode("c", "b"))})
	assert.Equal(t, "**WAITING** (workflow wf, version 2)  \na: COMPLETED  \nb: FAILED — task dag-wf-b-1 FAILED: tool_error: the build broke  \nc: PENDING", details)
}
