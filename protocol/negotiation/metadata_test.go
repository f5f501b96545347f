package negotiation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

func TestParsePreferences(t *testing.T) {
	got, err := ParsePreferences(`{"alice": {"max_rounds": 3, "scoreThreshold": 0.8}, "bob": {}}`)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.True(t, proto.Equal(&policypb.AgentPreferences{MaxRounds: 3, ScoreThreshold: 0.8}, got["alice"]))
	assert.True(t, proto.Equal(&policypb.AgentPreferences{}, got["bob"]))

	none, err := ParsePreferences("  ")
	require.NoError(t, err)
	assert.Nil(t, none)

	for text, want := range map[string]string{
		`[1]`:                             "is not a JSON object of agent id to preferences",
		`null`:                            "it is null",
		`{"": {}}`:                        "empty agent id",
		`{"a": {"rounds": 3}}`:            `preferences of "a"`,
		`{"a": {"score_threshold": 1.5}}`: "score_threshold 1.5 is outside 0..1",
	} {
		_, err := ParsePreferences(text)
		require.ErrorIs(t, err, ErrInvalidPolicy, text)
		assert.Contains(t, err.Error(), want, text)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]string{"": ModeContract, "contract": ModeContract, " Debate ": ModeDebate} {
		got, err := ParseMode(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := ParseMode("vote")
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.True(t, strings.Contains(err.Error(), `"vote" is not "contract" or "debate"`), err.Error())
}
