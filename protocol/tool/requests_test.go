package tool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
)

func TestValidateCall(t *testing.T) {
	ok := &toolpb.ToolCall{ProviderId: "fs", ToolName: "read", Args: []byte(`{}`)}
	assert.NoError(t, ValidateCall(ok, 10))
	assert.Equal(t, CodeValidation, CodeOf(ValidateCall(ok, 1)))
	assert.Error(t, ValidateCall(&toolpb.ToolCall{ToolName: "read"}, 10))
	assert.Error(t, ValidateCall(&toolpb.ToolCall{ProviderId: "fs"}, 10))
}

func TestParseResumeAfter(t *testing.T) {
	n, err := ParseResumeAfter("k", " 7 ")
	require.NoError(t, err)
	assert.EqualValues(t, 7, n)
	_, err = ParseResumeAfter("k", "x")
	assert.ErrorContains(t, err, `k "x" is not a frame number`)
	assert.Equal(t, CodeValidation, CodeOf(err))
}

func TestParseReply(t *testing.T) {
	env, err := ParseReply("r", "", "a", "")
	require.NoError(t, err)
	assert.False(t, env)
	env, err = ParseReply("r", " envelope ", "a", "agent-1")
	require.NoError(t, err)
	assert.True(t, env)
	_, err = ParseReply("r", "envelope", "a", "")
	assert.ErrorContains(t, err, "envelope needs the calling agent")
	_, err = ParseReply("r", "mail", "a", "agent-1")
	assert.ErrorContains(t, err, "the only value is envelope")
}
