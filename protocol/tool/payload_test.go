package tool

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPayloadJSON holds every payload to the encoding the types had before they moved here
// (activities.ToolSummary, ToolCallPolicy, ToolCallPayload, ToolResultPayload,
// ToolErrorPayload and frontend.ToolReplyPayload): these payloads are in recorded workflow
// histories and on the wire.
func TestPayloadJSON(t *testing.T) {
	no := false
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"summary zero", Summary{}, `{"status":"","frames":0,"bytes":0}`},
		{"summary", Summary{Status: "cancelled", ErrorCode: "CANCELLED", Message: "cancelled by op", Frames: 3, Bytes: 42, Partial: true, Attempt: 2, CancelledBy: "op"},
			`{"status":"cancelled","error_code":"CANCELLED","message":"cancelled by op","frames":3,"bytes":42,"partial_result":true,"attempt":2,"cancelled_by":"op"}`},
		{"policy zero", CallPolicy{}, `{"timeout_ms":0,"network_policy":"","privilege_level":""}`},
		{"policy", CallPolicy{TimeoutMs: 60000, BudgetWallMs: 5, BudgetCPUMs: 6, NetworkPolicy: "DENY_ALL", PrivilegeLevel: "MINIMAL", WorktreeRequired: true},
			`{"timeout_ms":60000,"budget_wall_ms":5,"budget_cpu_ms":6,"network_policy":"DENY_ALL","privilege_level":"MINIMAL","worktree_required":true}`},
		{"call zero", CallPayload{},
			`{"call_id":"","tool_name":"","provider_id":"","args":null,"content_type":"","execution_policy":{"timeout_ms":0,"network_policy":"","privilege_level":""},"stream":false,"caller":""}`},
		{"call", CallPayload{CallID: "c1", ToolName: "t", ProviderID: "p", Args: json.RawMessage(`{"a":1}`), ContentType: "application/json",
			Policy: CallPolicy{TimeoutMs: 1000, NetworkPolicy: "DENY_ALL", PrivilegeLevel: "MINIMAL"}, Stream: true, Caller: "agent-a", Worktree: "wt-1"},
			`{"call_id":"c1","tool_name":"t","provider_id":"p","args":{"a":1},"content_type":"application/json","execution_policy":{"timeout_ms":1000,"network_policy":"DENY_ALL","privilege_level":"MINIMAL"},"stream":true,"caller":"agent-a","worktree":"wt-1"}`},
		{"result zero", ResultPayload{}, `{"call_id":"","status":"","result_b64":null,"content_type":"","frame_no":0}`},
		{"result", ResultPayload{CallID: "c1", Status: "OK", ResultB64: []byte("hi"), ContentType: "text/plain", FrameNo: 4},
			`{"call_id":"c1","status":"OK","result_b64":"aGk=","content_type":"text/plain","frame_no":4}`},
		{"error zero", ErrorPayload{}, `{"call_id":"","error_code":"","note":""}`},
		{"error", ErrorPayload{CallID: "c1", ErrorCode: "TOOL_TIMEOUT", Note: "slow", PartialResult: true},
			`{"call_id":"c1","error_code":"TOOL_TIMEOUT","note":"slow","partial_result":true}`},
		{"reply zero", ReplyPayload{}, `{"call_id":""}`},
		{"reply", ReplyPayload{CallID: "c1", Status: "OK", ResultB64: []byte("hi"), ContentType: "text/plain", Final: &no, ErrorCode: "E", Note: "n"},
			`{"call_id":"c1","status":"OK","result_b64":"aGk=","content_type":"text/plain","final":false,"error_code":"E","note":"n"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.v)
			require.NoError(t, err)
			assert.Equal(t, c.want, string(b))
		})
	}
	assert.Equal(t, `{"status":"ok","frames":1,"bytes":2}`, string(Summary{Status: "ok", Frames: 1, Bytes: 2}.JSON()))
}
