package activities

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
)

// TestSignalWorkflowTriesTheUpdateFirst: with Update set, SignalWorkflow sends the update
// (with its id) and nothing more when it completes; when it is refused, or has not completed
// within UpdateWait, the signal goes instead.
func TestSignalWorkflowTriesTheUpdateFirst(t *testing.T) {
	in := SignalInput{WorkflowID: "agent/a", Signal: "sig", Update: "upd", UpdateID: "enqueue/t1", UpdateWait: 50 * time.Millisecond,
		Arg: json.RawMessage(`{"TaskID":"t1"}`)}
	isUpdate := mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.WorkflowID == in.WorkflowID && o.UpdateName == in.Update && o.UpdateID == in.UpdateID
	})
	for _, tc := range []struct {
		name   string
		get    func(ctx context.Context) error // the handle's Get
		signal bool
	}{
		{name: "update completes", get: func(context.Context) error { return nil }},
		{name: "update refused", get: func(context.Context) error { return errors.New("unknown update upd") }, signal: true},
		{name: "update not completed within UpdateWait", signal: true, get: func(ctx context.Context) error {
			<-ctx.Done() // a lifecycle whose worker died answers only after its workflow task timed out
			return ctx.Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &mocks.Client{}
			h := &mocks.WorkflowUpdateHandle{}
			c.On("UpdateWorkflow", mock.Anything, isUpdate).Return(h, nil).Once()
			h.On("Get", mock.Anything, mock.Anything).Return(func(ctx context.Context, _ interface{}) error { return tc.get(ctx) }).Once()
			if tc.signal {
				c.On("SignalWorkflow", mock.Anything, in.WorkflowID, "", in.Signal, in.Arg).Return(nil).Once()
			}
			require.NoError(t, (&Activities{Temporal: c}).SignalWorkflow(t.Context(), in))
			c.AssertExpectations(t)
			h.AssertExpectations(t)
		})
	}
}
