package tool

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
)

func TestValidateRegistration(t *testing.T) {
	d := &connectorpb.ToolDescriptor{ToolName: "t"}
	assert.Nil(t, ValidateRegistration(&connectorpb.ProviderRegisterRequest{ProviderId: "p", Tools: []*connectorpb.ToolDescriptor{d}}))
	assert.Equal(t, "validation_error: tools is empty: a provider advertises at least one tool descriptor (§18.1)",
		ValidateRegistration(&connectorpb.ProviderRegisterRequest{ProviderId: "p"}).Error())
	assert.Equal(t, "validation_error: 1025 tools is more than the 1024 one provider may register",
		ValidateRegistration(&connectorpb.ProviderRegisterRequest{ProviderId: "p", Tools: make([]*connectorpb.ToolDescriptor, 1025)}).Error())
	perr := ValidateRegistration(&connectorpb.ProviderRegisterRequest{Tools: []*connectorpb.ToolDescriptor{d}})
	if assert.NotNil(t, perr) {
		assert.NotContains(t, perr.Msg, "VALIDATION_ERROR", "the tool rule's own code is not repeated")
	}
	assert.NotNil(t, ValidateDescribe(&connectorpb.DescribeToolsRequest{}))
	assert.Nil(t, ValidateDescribe(&connectorpb.DescribeToolsRequest{ProviderId: "p"}))
}

func TestDescriptorReasonsNamesDuplicates(t *testing.T) {
	reasons := DescriptorReasons([]*connectorpb.ToolDescriptor{{}, {}})
	assert.Len(t, reasons, 2)
	assert.Contains(t, reasons[0], "tools[0]: ")
}

// TestValidateProviderKind: the kind filter of ListToolProviders is empty or a provider kind;
// anything else is validation_error.
func TestValidateProviderKind(t *testing.T) {
	for _, k := range []string{"", ProviderKindConnector, ProviderKindMCP, ProviderKindBuiltin} {
		assert.Nil(t, ValidateProviderKind(k), k)
	}
	assert.Equal(t, `validation_error: kind "agent" is not a provider kind: connector, mcp or builtin`, ValidateProviderKind("agent").Error())
}
