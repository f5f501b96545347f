package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// TestValidateDirectoryRequests: the directory's reads refuse a missing or malformed id and
// an unknown state filter with validation_error, and accept the rest.
func TestValidateDirectoryRequests(t *testing.T) {
	for name, tc := range map[string]struct {
		err *protocol.Error
		msg string // "" = valid
	}{
		"agent":                 {protocol.ValidateGetAgent(&directorypb.GetAgentRequest{AgentId: "billing"}), ""},
		"no agent_id":           {protocol.ValidateGetAgent(&directorypb.GetAgentRequest{}), "agent_id is required"},
		"bad agent_id":          {protocol.ValidateGetAgent(&directorypb.GetAgentRequest{AgentId: "a b"}), "must be 1-128 characters"},
		"every agent":           {protocol.ValidateListAgents(&directorypb.ListAgentsRequest{}), ""},
		"agents in a state":     {protocol.ValidateListAgents(&directorypb.ListAgentsRequest{State: "RUNNABLE", Capability: "x"}), ""},
		"unknown state":         {protocol.ValidateListAgents(&directorypb.ListAgentsRequest{State: "runnable"}), `state "runnable" is not an AgentState name`},
		"unspecified state":     {protocol.ValidateListAgents(&directorypb.ListAgentsRequest{State: "AGENT_STATE_UNSPECIFIED"}), "is not an AgentState name"},
		"handoff":               {protocol.ValidateGetHandoff(&directorypb.GetHandoffRequest{RequestId: "h-1"}), ""},
		"no request_id":         {protocol.ValidateGetHandoff(&directorypb.GetHandoffRequest{}), "request_id is required"},
		"request_id too long":   {protocol.ValidateGetHandoff(&directorypb.GetHandoffRequest{RequestId: strings.Repeat("h", 129)}), "must be 1-128 characters"},
		"request_id with slash": {protocol.ValidateGetHandoff(&directorypb.GetHandoffRequest{RequestId: "h/1"}), "must be 1-128 characters"},
		"every task":            {protocol.ValidateListTasks(&directorypb.ListTasksRequest{}), ""},
		"tasks filtered":        {protocol.ValidateListTasks(&directorypb.ListTasksRequest{AgentId: "a", State: "cancelled", TaskId: "dag-x-n-1", Limit: 1000}), ""},
		"task state misspelt":   {protocol.ValidateListTasks(&directorypb.ListTasksRequest{State: "done"}), `state "done": want one of active, completed`},
		"task agent malformed":  {protocol.ValidateListTasks(&directorypb.ListTasksRequest{AgentId: "agent/a"}), "agent_id"},
		"task_id with NUL":      {protocol.ValidateListTasks(&directorypb.ListTasksRequest{TaskId: "a\x00"}), "task_id must be valid UTF-8"},
		"task limit too large":  {protocol.ValidateListTasks(&directorypb.ListTasksRequest{Limit: 1001}), "limit 1001 is more than 1000"},
		"every run":             {protocol.ValidateListDAGRuns(&directorypb.ListDAGRunsRequest{}), ""},
		"runs filtered":         {protocol.ValidateListDAGRuns(&directorypb.ListDAGRunsRequest{WorkflowIdPrefix: "release-", State: "WAITING"}), ""},
		"run prefix with quote": {protocol.ValidateListDAGRuns(&directorypb.ListDAGRunsRequest{WorkflowIdPrefix: "x' OR 1=1"}), "workflow_id_prefix"},
		"run prefix dag/":       {protocol.ValidateListDAGRuns(&directorypb.ListDAGRunsRequest{WorkflowIdPrefix: "dag/x"}), "workflow_id_prefix"},
		"run state lower case":  {protocol.ValidateListDAGRuns(&directorypb.ListDAGRunsRequest{State: "running"}), "want one of RUNNING"},
		"every tool call":       {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{}), ""},
		"calls filtered":        {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{Caller: "operator:ops", ProviderId: "builtin", ToolName: "fs.read", State: "ok"}), ""},
		"anonymous calls":       {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{Caller: "anonymous"}), ""},
		"bare caller":           {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{Caller: "alice"}), "want agent:<agent_id>"},
		"caller of no kind":     {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{Caller: "user:alice"}), "want agent:<agent_id>"},
		"call state misspelt":   {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{State: "failed"}), "want one of running, ok, error, cancelled"},
		"call provider bad":     {protocol.ValidateListToolCalls(&directorypb.ListToolCallsRequest{ProviderId: " x"}), "provider_id"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.msg == "" {
				assert.Nil(t, tc.err)
				return
			}
			require.NotNil(t, tc.err)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, tc.err.Code)
			assert.Contains(t, tc.err.Error(), tc.msg)
		})
	}
}
