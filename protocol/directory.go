package protocol

import (
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
)

// The checks of the extension sw4rmext.directory.v1.DirectoryService: the reads of the
// registry (§14) and of one handoff (§17.6) that the canonical services lack.

// ValidateGetAgent checks a GetAgent request: a valid agent_id.
func ValidateGetAgent(req *directorypb.GetAgentRequest) *Error {
	return ValidateAgentID(req.GetAgentId())
}

// ValidateListAgents checks a ListAgents request's filters: a state filter must be the enum
// name of a defined AgentState (§8), so a misspelt one is refused rather than matching
// nothing.
func ValidateListAgents(req *directorypb.ListAgentsRequest) *Error {
	if s := req.GetState(); s != "" {
		if v, ok := commonpb.AgentState_value[s]; !ok || v == 0 {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "state %q is not an AgentState name (e.g. RUNNABLE, WAITING, SUSPENDED)", truncate(s))
		}
	}
	return nil
}

// ValidateGetHandoff checks a GetHandoff request: a request_id of the shape RequestHandoff
// accepts (the agent-id charset, since it names the workflow handoff/<request_id>).
func ValidateGetHandoff(req *directorypb.GetHandoffRequest) *Error {
	switch id := req.GetRequestId(); {
	case id == "":
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required")
	case !agentIDPattern.MatchString(id):
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", truncate(id))
	}
	return nil
}
