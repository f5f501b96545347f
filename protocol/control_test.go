package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

func TestParseControl(t *testing.T) {
	env := func(payload string) *commonpb.Envelope {
		return &commonpb.Envelope{MessageType: commonpb.MessageType_CONTROL, Payload: []byte(payload)}
	}
	c, perr := protocol.ParseControl(env(`{"type":"NON_PREEMPTIBLE_BEGIN","task_id":"t1","max_duration_ms":1500}`))
	require.Nil(t, perr)
	require.Equal(t, "t1", c.TaskID)
	require.Equal(t, 1500, int(c.MaxDuration().Milliseconds()))

	for name, tc := range map[string]struct {
		env  *commonpb.Envelope
		code commonpb.ErrorCode
		want string
	}{
		"not CONTROL":             {&commonpb.Envelope{MessageType: commonpb.MessageType_DATA}, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "expected a CONTROL envelope"},
		"not JSON":                {env(`run!`), commonpb.ErrorCode_VALIDATION_ERROR, "not a valid control object"},
		"unknown field":           {env(`{"type":"RUN","task_id":"t","prio":1}`), commonpb.ErrorCode_VALIDATION_ERROR, "unknown field"},
		"trailing data":           {env(`{"type":"KILL","task_id":"t"} {}`), commonpb.ErrorCode_VALIDATION_ERROR, "trailing data"},
		"no type":                 {env(`{"task_id":"t"}`), commonpb.ErrorCode_VALIDATION_ERROR, `needs a "type"`},
		"unknown type":            {env(`{"type":"PAUSE","task_id":"t"}`), commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, `unknown CONTROL type "PAUSE"`},
		"no task_id":              {env(`{"type":"PREEMPT_REQUEST"}`), commonpb.ErrorCode_VALIDATION_ERROR, "needs a task_id"},
		"priority out of range":   {env(`{"type":"RUN","task_id":"t","priority":-20}`), commonpb.ErrorCode_VALIDATION_ERROR, "outside -19..20"},
		"section without bound":   {env(`{"type":"NON_PREEMPTIBLE_BEGIN","task_id":"t"}`), commonpb.ErrorCode_VALIDATION_ERROR, "positive max_duration_ms"},
		"section bound too large": {env(`{"type":"NON_PREEMPTIBLE_BEGIN","task_id":"t","max_duration_ms":3600001}`), commonpb.ErrorCode_VALIDATION_ERROR, "exceeds"},
		"negative grace":          {env(`{"type":"TERMINATE","task_id":"t","grace_ms":-1}`), commonpb.ErrorCode_VALIDATION_ERROR, "grace_ms must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			_, perr := protocol.ParseControl(tc.env)
			require.NotNil(t, perr)
			require.Equal(t, tc.code, perr.Code)
			require.Contains(t, perr.Msg, tc.want)
		})
	}
	_, perr = protocol.ParseControl(env(`{"type":"SHUTDOWN","grace_ms":3000}`))
	require.Nil(t, perr, "SHUTDOWN names no task")
}
