package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Search-attribute registration retries what a starting or busy server answers, and gives up
// at once on what retrying cannot change.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewUnavailable("starting"), true},
		{serviceerror.NewInternal("GetNamespace operation failed. Error interrupted (9)"), true},
		{serviceerror.NewDeadlineExceeded("slow"), true},
		{fmt.Errorf("list search attributes: %w", serviceerror.NewUnavailable("wrapped")), true},
		{serviceerror.NewPermissionDenied("no", ""), false},
		{serviceerror.NewInvalidArgument("bad name"), false},
		{errors.New("plain"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The DAG run is registered under its function name, which the frontend starts it by.
func TestRegisterWorkflowsIncludesDAGRun(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	RegisterWorkflows(env)
	def, err := proto.Marshal(&workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{
		"a": {NodeId: "a", AgentId: "x", Dependencies: []string{"b"}}, "b": {NodeId: "b", AgentId: "x", Dependencies: []string{"a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	env.ExecuteWorkflow("DAGRun", workflows.DAGRunInput{WorkflowID: "wf", Definition: def})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "workflow_cycle_detected") {
		t.Fatalf("DAGRun of a cyclic definition: %v, want workflow_cycle_detected", err)
	}
}

// A tool runner is registered under its method's name, RunTool, which the ToolCall workflow
// runs on the provider's task queue.
func TestRegisterToolRunner(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	RegisterToolRunner(env, &activities.ToolRunner{ProviderID: "p"})
	_, err := env.ExecuteActivity("RunTool", activities.RunToolInput{Request: tools.Request{ProviderID: "other"}})
	if err == nil || !strings.Contains(err.Error(), "reached the worker of provider p") {
		t.Fatalf("RunTool of another provider's call: %v, want the runner's refusal", err)
	}
}

// The probe query names every attribute, each with a value of its type.
func TestSearchAttributesProbe(t *testing.T) {
	got := searchAttributesProbe(map[string]enums.IndexedValueType{
		"B": enums.INDEXED_VALUE_TYPE_BOOL, "K": enums.INDEXED_VALUE_TYPE_KEYWORD, "L": enums.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	})
	if want := "B = true OR K = 'probe' OR L = 'probe'"; got != want {
		t.Errorf("probe = %q, want %q", got, want)
	}
	if q := searchAttributesProbe(workflows.SearchAttributes()); strings.Count(q, " OR ") != len(workflows.SearchAttributes())-1 {
		t.Errorf("probe of SW4RM's attributes = %q", q)
	}
}
