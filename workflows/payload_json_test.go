package workflows

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// mustJSON encodes v, failing the test on an error.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// contains fails unless every piece is in s.
func contains(t *testing.T, s string, pieces ...string) {
	t.Helper()
	for _, p := range pieces {
		if !strings.Contains(s, p) {
			t.Errorf("%s\nlacks %s", s, p)
		}
	}
}

// TestDAGRunInputJSON: the definition is protojson in the input; the base64 of recorded runs
// still decodes to the same definition.
func TestDAGRunInputJSON(t *testing.T) {
	def := &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{
		"a": {NodeId: "a", AgentId: "agent-1", TriggerType: workflowpb.TriggerType_MANUAL},
	}}
	raw, err := proto.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	in := DAGRunInput{WorkflowID: "wf", Version: 1, Definition: raw, Data: `{"x":1}`, Revision: DAGRevisionCurrent}
	got := mustJSON(t, in)
	contains(t, got, `"Definition":{"workflowId":"wf"`, `"agentId":"agent-1"`, `"triggerType":"MANUAL"`, `"Data":{"x":1}`)
	if strings.Contains(got, base64.StdEncoding.EncodeToString(raw)) {
		t.Errorf("the definition is still base64: %s", got)
	}
	type old DAGRunInput // encoding/json's form, as recorded histories hold it
	for _, enc := range []string{got, mustJSON(t, old(in))} {
		var back DAGRunInput
		if err := json.Unmarshal([]byte(enc), &back); err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		d := &workflowpb.WorkflowDefinition{}
		if err := proto.Unmarshal(back.Definition, d); err != nil || !proto.Equal(d, def) {
			t.Fatalf("decoded definition %v, %v; want %v", d, err, def)
		}
		if back.WorkflowID != "wf" || back.Data != `{"x":1}` || back.Revision != DAGRevisionCurrent {
			t.Fatalf("decoded %+v", back)
		}
	}
}

// TestDAGNodeStateJSON: statuses by name, unset times left out; numbers still decode.
func TestDAGNodeStateJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := DAGRunState{WorkflowID: "wf", Status: DAGWaiting, StartedAt: at, Data: `{"b":{"ok":true}}`, Nodes: map[string]DAGNodeState{
		"a": {Status: workflowpb.NodeStatus_FAILED, StartedAt: at, Error: "task t FAILED", Attempts: 1},
		"b": {Status: workflowpb.NodeStatus_COMPLETED, Output: `{"ok":true}`},
	}}
	got := mustJSON(t, st)
	contains(t, got, `"Status":"FAILED"`, `"StartedAt":"2026-01-02T03:04:05Z"`, `"Data":{"b":{"ok":true}}`, `"Output":{"ok":true}`)
	if strings.Contains(got, "0001-01-01") {
		t.Errorf("an unset time is written: %s", got)
	}
	var back DAGRunState
	if err := json.Unmarshal([]byte(got), &back); err != nil || back.Nodes["a"].Status != workflowpb.NodeStatus_FAILED || !back.Nodes["a"].CompletedAt.IsZero() ||
		back.Data != st.Data || back.Nodes["b"].Output != `{"ok":true}` {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	old := `{"Status":5,"StartedAt":"2026-01-02T03:04:05Z","CompletedAt":"0001-01-01T00:00:00Z","Output":"{\"ok\":true}","Attempts":1}`
	var ns DAGNodeState
	if err := json.Unmarshal([]byte(old), &ns); err != nil || ns.Status != workflowpb.NodeStatus_FAILED || !ns.StartedAt.Equal(at) || !ns.CompletedAt.IsZero() || ns.Output != `{"ok":true}` {
		t.Fatalf("decoded the old form as %+v, %v", ns, err)
	}
	var oldRun DAGRunState
	if err := json.Unmarshal([]byte(`{"WorkflowID":"wf","Status":"WAITING","Data":"{\"x\":1}","StartedAt":"0001-01-01T00:00:00Z"}`), &oldRun); err != nil || oldRun.Data != `{"x":1}` {
		t.Fatalf("decoded the old run state as %+v, %v", oldRun, err)
	}
}

// TestTaskJSON: a task's parameters are JSON and its durations text; error codes by name;
// the old forms decode.
func TestTaskJSON(t *testing.T) {
	in := TaskInput{TaskID: "t", AgentID: "a", Params: []byte(`{"q":"x"}`), ContentType: "application/json", Scope: "s",
		HITLTimeout: 5 * time.Minute, Revision: TaskRevisionCurrent}
	got := mustJSON(t, in)
	contains(t, got, `"Params":{"q":"x"}`, `"HITLTimeout":"5m0s"`)
	if strings.Contains(got, "SubmittedAt") || strings.Contains(got, "WaitRecheck") {
		t.Errorf("unset fields are written: %s", got)
	}
	old := `{"TaskID":"t","AgentID":"a","Priority":0,"Params":"eyJxIjoieCJ9","ContentType":"application/json","Scope":"s","SubmittedAt":"0001-01-01T00:00:00Z","HITLTimeout":300000000000,"Revision":2}`
	for _, enc := range []string{got, old} {
		var back TaskInput
		if err := json.Unmarshal([]byte(enc), &back); err != nil || string(back.Params) != `{"q":"x"}` || back.HITLTimeout != 5*time.Minute || !back.SubmittedAt.IsZero() {
			t.Fatalf("decoded %s as %+v, %v", enc, back, err)
		}
	}

	done := mustJSON(t, TaskStatus{TaskID: "t", State: TaskCompleted, Result: `{"n":2}`})
	contains(t, done, `"Result":{"n":2}`)
	for _, enc := range []string{done, `{"TaskID":"t","State":"COMPLETED","Result":"{\"n\":2}"}`} {
		var back TaskStatus
		if err := json.Unmarshal([]byte(enc), &back); err != nil || back.Result != `{"n":2}` {
			t.Fatalf("decoded %s as %+v, %v", enc, back, err)
		}
	}
	st := TaskStatus{TaskID: "t", State: TaskFailed, ErrorCode: commonpb.ErrorCode_TOOL_TIMEOUT}
	got = mustJSON(t, st)
	contains(t, got, `"ErrorCode":"TOOL_TIMEOUT"`)
	code := int32(commonpb.ErrorCode_TOOL_TIMEOUT)
	for _, enc := range []string{got, `{"TaskID":"t","State":"FAILED","ErrorCode":` + jsonInt(code) + `}`} {
		var back TaskStatus
		if err := json.Unmarshal([]byte(enc), &back); err != nil || back.ErrorCode != commonpb.ErrorCode_TOOL_TIMEOUT || back.State != TaskFailed {
			t.Fatalf("decoded %s as %+v, %v", enc, back, err)
		}
	}
	if s := mustJSON(t, TaskEvent{State: TaskRunning}); strings.Contains(s, "ErrorCode") {
		t.Errorf("no error code is written as %s", s)
	}
}

func jsonInt(n int32) string { b, _ := json.Marshal(n); return string(b) }

// TestToolCallInputJSON: arguments as a JSON object, the policy's durations as text and its
// privilege by name; the old forms decode.
func TestToolCallInputJSON(t *testing.T) {
	in := ToolCallInput{Request: tools.Request{CallID: "c", ProviderID: "builtin", ToolName: "fs.read", Args: []byte(`{"path":"a.txt"}`),
		Policy: tool.Policy{Timeout: 5 * time.Minute, Privilege: tool.PrivilegePrivileged, Network: tool.NetworkDenyAll}},
		Caller: "agent-1", Approval: &ToolApproval{InvocationID: "i", Timeout: time.Hour}}
	got := mustJSON(t, in)
	contains(t, got, `"Args":{"path":"a.txt"}`, `"Timeout":"5m0s"`, `"Privilege":"PRIVILEGED"`, `"BudgetWall":"0s"`, `"Timeout":"1h0m0s"`)
	old := `{"Request":{"CallID":"c","ProviderID":"builtin","ToolName":"fs.read","ContentType":"","Args":"eyJwYXRoIjoiYS50eHQifQ==",` +
		`"Policy":{"Timeout":300000000000,"BudgetWall":0,"BudgetCPU":0,"Network":"DENY_ALL","Privilege":4,"WorktreeRequired":false,"MaxRetries":0,"Backoff":"","Notes":null},` +
		`"Worktree":"","Attempt":0},"Caller":"agent-1","TaskQueue":"","Approval":{"InvocationID":"i","Timeout":3600000000000,"Reasons":null}}`
	for _, enc := range []string{got, old} {
		var back ToolCallInput
		if err := json.Unmarshal([]byte(enc), &back); err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		p := back.Request.Policy
		if string(back.Request.Args) != `{"path":"a.txt"}` || p.Timeout != 5*time.Minute || p.Privilege != tool.PrivilegePrivileged ||
			p.Network != tool.NetworkDenyAll || back.Approval == nil || back.Approval.Timeout != time.Hour {
			t.Fatalf("decoded %s as %+v", enc, back)
		}
	}
}
