package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestMessagesToTheSchedulerAreDispatchedByType: a message addressed to the scheduler goes to
// the handler of its message type, never through the checks of data messages; a handler's
// refusal is the message's rejection and its failure Send's; a type without a handler is
// refused with unsupported_message_type, and every type with no_route when the process has
// no handlers at all.
func TestMessagesToTheSchedulerAreDispatchedByType(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	ctx := t.Context()
	toScheduler := func(mt commonpb.MessageType) *commonpb.Envelope {
		env := message("p", "c1")
		env.MessageType = mt
		return env
	}

	perr, err := r.Send(ctx, toScheduler(commonpb.MessageType_CONTROL), protocol.SchedulerID)
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	assert.Contains(t, perr.Msg, "scheduler's inbox")

	var got []commonpb.MessageType
	r.SetScheduler(SchedulerHandlers{
		commonpb.MessageType_CONTROL: func(_ context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
			got = append(got, env.GetMessageType())
			return nil, nil
		},
		commonpb.MessageType_TOOL_RESULT: func(context.Context, *commonpb.Envelope) (*protocol.Error, error) {
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "not yours"), nil
		},
		commonpb.MessageType_TOOL_ERROR: func(context.Context, *commonpb.Envelope) (*protocol.Error, error) {
			return nil, errors.New("store down")
		},
	}, nil)

	perr, err = r.Send(ctx, toScheduler(commonpb.MessageType_CONTROL), protocol.SchedulerID)
	require.NoError(t, err)
	require.Nil(t, perr)
	assert.Equal(t, []commonpb.MessageType{commonpb.MessageType_CONTROL}, got)

	perr, err = r.Send(ctx, toScheduler(commonpb.MessageType_TOOL_RESULT), protocol.SchedulerID)
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, perr.Code)

	_, err = r.Send(ctx, toScheduler(commonpb.MessageType_TOOL_ERROR), protocol.SchedulerID)
	require.ErrorContains(t, err, "store down")

	perr, err = r.Send(ctx, toScheduler(commonpb.MessageType_DATA), protocol.SchedulerID)
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, perr.Code)
	assert.Equal(t, "the scheduler takes CONTROL, TOOL_ERROR, TOOL_RESULT from agents, not DATA", perr.Msg)
}
