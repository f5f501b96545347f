package tool

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ValidateRegistration checks the shape of a RegisterProvider request (§18.1): a valid
// provider_id and 1 to MaxToolsPerProvider tools. The descriptors themselves are checked by
// DescriptorReasons, whose findings the response reports instead of refusing the call.
func ValidateRegistration(req *connectorpb.ProviderRegisterRequest) *protocol.Error {
	if err := ValidateProviderID(req.GetProviderId()); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", MessageOf(err))
	}
	switch n := len(req.GetTools()); {
	case n == 0:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "tools is empty: a provider advertises at least one tool descriptor (§18.1)")
	case n > MaxToolsPerProvider:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%d tools is more than the %d one provider may register", n, MaxToolsPerProvider)
	}
	return nil
}

// ValidateDescribe checks a DescribeTools request: a valid provider_id.
func ValidateDescribe(req *connectorpb.DescribeToolsRequest) *protocol.Error {
	if err := ValidateProviderID(req.GetProviderId()); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", MessageOf(err))
	}
	return nil
}

// ValidateProviderKind checks the kind filter of DirectoryService.ListToolProviders (the
// sw4rmext.directory.v1 extension): empty, or one of the provider kinds, so that a misspelt
// kind is refused rather than listing nothing.
func ValidateProviderKind(kind string) *protocol.Error {
	switch kind {
	case "", ProviderKindConnector, ProviderKindMCP, ProviderKindBuiltin:
		return nil
	}
	return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "kind %q is not a provider kind: %s, %s or %s",
		kind, ProviderKindConnector, ProviderKindMCP, ProviderKindBuiltin)
}

// DescriptorReasons lists what is wrong with each descriptor, in request order: the
// descriptor rules (ValidateDescriptor) and a tool_name given twice. None is nil.
func DescriptorReasons(tools []*connectorpb.ToolDescriptor) []string {
	var reasons []string
	var seen []string
	for i, d := range tools {
		if err := ValidateDescriptor(d); err != nil {
			reasons = append(reasons, fmt.Sprintf("tools[%d]: %s", i, MessageOf(err)))
			continue
		}
		if slices.Contains(seen, d.GetToolName()) {
			reasons = append(reasons, fmt.Sprintf("tools[%d]: tool_name %q is given twice", i, d.GetToolName()))
			continue
		}
		seen = append(seen, d.GetToolName())
	}
	return reasons
}

// MessageOf is a tool rule's message without its code prefix: an answer that carries its own
// code (validation_error) would otherwise say it twice.
func MessageOf(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Msg
	}
	return err.Error()
}
