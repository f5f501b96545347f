package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/tool"
	sw4rmtools "github.com/sw4rm/sw4rm-temporal/tools"
)

// toolCalls is the Tools pattern: the built-in echo tool.
type toolCalls struct {
	l      *ledger
	caller *sdk.Agent
	tc     *tool.Client
}

func (t *toolCalls) setup(ctx context.Context, r *runner) error {
	var err error
	if t.caller, err = r.agent(ctx, "tool-caller", nil); err != nil {
		return err
	}
	t.tc = tool.New(t.caller)
	r.read(ctx, t.caller, nil, nil)
	return nil
}

// call makes the call with call_id id, asked again with the same call_id while it gets no
// answer; it returns the final frame's summary and data.
func (t *toolCalls) call(ctx context.Context, id string, args json.RawMessage) (tool.Summary, []byte, error) {
	var sum tool.Summary
	var data []byte
	err := retry(ctx, t.l, func(ctx context.Context) error {
		f, err := t.tc.Do(ctx, tool.Call{CallID: id, ProviderID: sw4rmtools.BuiltinProviderID, ToolName: "echo", Args: args})
		if err != nil {
			return err
		}
		data = f.GetData()
		sum, err = tool.SummaryOf(f)
		return err
	})
	return sum, data, err
}

func (t *toolCalls) op(ctx context.Context, id string) {
	t.l.start(id)
	args := json.RawMessage(`{"loadgen_op":"` + id + `"}`)
	sum, data, err := t.call(ctx, id, args)
	var te *tool.Error
	switch {
	case errors.As(err, &te):
		t.l.note("tool_error_"+te.Code, 1)
		t.l.ack(id)
		t.l.fail(id)
		return
	case err != nil:
		return
	}
	t.l.ack(id)
	if sum.Status != "ok" || !jsonEqual(data, args) {
		t.l.note("wrong_answer", 1)
		t.l.fail(id)
		return
	}
	t.l.complete(id)
	// Asked again, a completed call_id is answered from its record; a new attempt would be
	// the tool run twice.
	again, _, err := t.call(ctx, id, args)
	if err == nil && again.Attempt != sum.Attempt {
		t.l.double(id)
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
