package inference

import (
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ScopesOf checks a CheckParallelism request (§9.2) and returns its two parsed scopes.
func ScopesOf(req *reasoningpb.ParallelismCheckRequest) (a, b Scope, perr *protocol.Error) {
	a, err := ParseScope(req.GetScopeA())
	if err != nil {
		return Scope{}, Scope{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "scope_a: %v", err)
	}
	b, err = ParseScope(req.GetScopeB())
	if err != nil {
		return Scope{}, Scope{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "scope_b: %v", err)
	}
	return a, b, nil
}
