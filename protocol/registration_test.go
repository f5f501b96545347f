package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

func TestRegistrationOf(t *testing.T) {
	req := &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{AgentId: "a-1", Name: "A"}}
	d, perr := protocol.RegistrationOf(req)
	require.Nil(t, perr)
	assert.Equal(t, commonpb.CommunicationClass_STANDARD, d.GetCommunicationClass(), "defaults filled in")
	assert.Equal(t, commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED, req.GetAgent().GetCommunicationClass(), "the request is left as it came")
	_, perr = protocol.RegistrationOf(&registrypb.RegisterAgentRequest{})
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
}
