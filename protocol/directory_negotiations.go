package protocol

import "github.com/sw4rm/sw4rm-temporal/proto/directorypb"

// NegotiationListStates are the states a ListNegotiations filter names: a negotiation or
// room review still running (paused for a human included), or closed.
var NegotiationListStates = []string{"open", "closed"}

// ValidateListNegotiations checks a ListNegotiations request's filters: a known state, a
// negotiation_id of the agent-id shape (so it stays a literal in a visibility query), and a
// limit of at most MaxListLimit.
func ValidateListNegotiations(req *directorypb.ListNegotiationsRequest) *Error {
	if perr := checkStateFilter(req.GetState(), NegotiationListStates); perr != nil {
		return perr
	}
	if perr := checkIDFilter("negotiation_id", req.GetNegotiationId()); perr != nil {
		return perr
	}
	return checkLimit(req.GetLimit())
}
