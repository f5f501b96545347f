package frontend

import (
	"errors"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// fallbackKeys are the request metadata keys of a configured fallback, by the field they set.
var fallbackKeys = map[string]string{
	hitl.FieldPolicy:        wire.HITLUnavailablePolicyKey,
	hitl.FieldThreshold:     wire.HITLAutoThresholdKey,
	hitl.FieldMaxExtensions: wire.HITLMaxExtensionsKey,
	hitl.FieldExtendBy:      wire.HITLExtendByKey,
}

// hitlFallbackOf reads a negotiation's or a room proposal's own hitl_unavailable_policy
// (§15.4) from the request metadata md: nil when md sets none, so that the deployment's
// applies. A malformed or incomplete one — an unknown policy, AUTO_DECIDE_THRESHOLD without
// a threshold in (0, 1], more than 3 extensions, a value its policy would ignore — is refused
// with validation_error naming the key.
func hitlFallbackOf(md map[string]string) (*hitl.Fallback, error) {
	f, err := hitl.ParseFallback(md[wire.HITLUnavailablePolicyKey], md[wire.HITLAutoThresholdKey], md[wire.HITLMaxExtensionsKey], md[wire.HITLExtendByKey])
	if err != nil {
		var ferr *hitl.FallbackError
		if errors.As(err, &ferr) {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s: %s (§15.4)", fallbackKeys[ferr.Field], ferr.Msg)
		}
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s: %v", wire.HITLUnavailablePolicyKey, err)
	}
	if f.Policy == "" {
		return nil, nil
	}
	return &f, nil
}
