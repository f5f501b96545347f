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
