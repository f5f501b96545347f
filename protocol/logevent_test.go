package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

func TestLogDetails(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	d, perr := protocol.LogDetails(&loggingpb.LogEvent{EventType: "x", DetailsJson: `{"a":1}`, Level: "INFO", Ts: timestamppb.New(ts)})
	require.Nil(t, perr)
	assert.Equal(t, map[string]any{"a": 1.0, "level": "INFO", "agent_ts": "2026-01-02T03:04:05.000006Z"}, d)
	_, perr = protocol.LogDetails(&loggingpb.LogEvent{})
	assert.Equal(t, "validation_error: event_type is required (§19)", perr.Error())
	_, perr = protocol.LogDetails(&loggingpb.LogEvent{EventType: "x", DetailsJson: `[1]`})
	require.NotNil(t, perr)
	assert.Contains(t, perr.Error(), "validation_error: details_json must be a JSON object")
}
