package negotiation

import (
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ValidateSubmitEvaluation checks a SchedulerService.SubmitEvaluation request (§17.3): a
// negotiation_id and a report from a well-formed agent_id.
func ValidateSubmitEvaluation(req *schedulerpb.SubmitEvaluationRequest) *protocol.Error {
	if perr := ValidateID(req.GetNegotiationId()); perr != nil {
		return perr
	}
	rep := req.GetReport()
	if rep == nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "report is required")
	}
	if perr := protocol.ValidateAgentID(rep.GetFromAgent()); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "report.from_agent: %s", perr.Msg)
	}
	return nil
}

// ActionAbort is the HitlAction that aborts the negotiation instead of deciding its wait.
const ActionAbort = "abort"

// HITLActionOf reads a HitlAction request's action (§17.2) as a HITL decision name: the
// synonyms continue and accept are approve, reject is deny; ActionAbort and anything else
// pass through lower-cased, for the decision rules to accept or refuse.
func HITLActionOf(action string) string {
	switch a := strings.ToLower(strings.TrimSpace(action)); a {
	case "continue", "accept":
		return "approve"
	case "reject":
		return "deny"
	default:
		return a
	}
}
