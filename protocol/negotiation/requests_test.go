package negotiation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
)

func TestValidateOpen(t *testing.T) {
	ok := func() *negotiationpb.NegotiationOpen {
		return &negotiationpb.NegotiationOpen{NegotiationId: "n1", Topic: "price", Participants: []string{"a", "b"}, Intensity: commonpb.DebateIntensity_MEDIUM}
	}
	d, perr := ValidateOpen(ok())
	require.Nil(t, perr)
	assert.Zero(t, d)
	withTimeout := ok()
	withTimeout.DebateTimeout = durationpb.New(time.Minute)
	d, perr = ValidateOpen(withTimeout)
	require.Nil(t, perr)
	assert.Equal(t, time.Minute, d)

	for name, tc := range map[string]struct {
		edit func(*negotiationpb.NegotiationOpen)
		want string
	}{
		"no id":             {func(r *negotiationpb.NegotiationOpen) { r.NegotiationId = "" }, "negotiation_id is required"},
		"bad id":            {func(r *negotiationpb.NegotiationOpen) { r.NegotiationId = "a b" }, "negotiation_id: "},
		"other correlation": {func(r *negotiationpb.NegotiationOpen) { r.CorrelationId = "x" }, "must equal negotiation_id"},
		"no topic":          {func(r *negotiationpb.NegotiationOpen) { r.Topic = " " }, "topic is required"},
		"one participant":   {func(r *negotiationpb.NegotiationOpen) { r.Participants = []string{"a"} }, "at least two participants"},
		"twice":             {func(r *negotiationpb.NegotiationOpen) { r.Participants = []string{"a", "a"} }, `participant "a" is listed twice`},
		"bad participant":   {func(r *negotiationpb.NegotiationOpen) { r.Participants = []string{"a", ""} }, "participants[1]"},
		"negative timeout":  {func(r *negotiationpb.NegotiationOpen) { r.DebateTimeout = durationpb.New(-time.Second) }, "debate_timeout"},
	} {
		r := ok()
		tc.edit(r)
		_, perr := ValidateOpen(r)
		if assert.NotNil(t, perr, name) {
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code, name)
			assert.Contains(t, perr.Msg, tc.want, name)
		}
	}
}

func TestValidateDraft(t *testing.T) {
	assert.Nil(t, ValidateDraft("n1", "a", "application/json", []byte("{}"), 0))
	assert.Contains(t, ValidateDraft("n1", "", "application/json", nil, 0).Msg, "from_agent")
	assert.Contains(t, ValidateDraft("n1", "a", "", nil, 0).Msg, "content_type is required")
	big := ValidateDraft("n1", "a", "application/json", make([]byte, 11), 10)
	if assert.NotNil(t, big) {
		assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, big.Code)
	}
	assert.Nil(t, ValidateEvaluation(&negotiationpb.Evaluation{NegotiationId: "n1", FromAgent: "a"}))
	assert.NotNil(t, ValidateEvaluation(&negotiationpb.Evaluation{NegotiationId: "n1"}))
}

func TestParseOpenPreferences(t *testing.T) {
	prefs, perr := ParseOpenPreferences(`{"a":{"max_rounds":3}}`, []string{"a", "b"})
	require.Nil(t, perr)
	assert.EqualValues(t, 3, prefs["a"].GetMaxRounds())
	_, perr = ParseOpenPreferences(`{"c":{}}`, []string{"a", "b"})
	assert.Contains(t, perr.Msg, "not a participant")
	_, perr = ParseOpenPreferences(`[`, []string{"a"})
	assert.Contains(t, perr.Msg, "not a JSON object")
}
