package builtin

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// frame is one frame a call emitted.
type frame struct {
	contentType string
	data        string
}

// recorder collects the frames of a call.
type recorder struct {
	mu     sync.Mutex
	frames []frame
	// onFrame, when set, is told of each frame after it is recorded.
	onFrame func(frame)
	// fail, when set, is what emit answers.
	fail error
}

func (r *recorder) emit(_ context.Context, contentType string, data []byte) error {
	f := frame{contentType, string(data)}
	r.mu.Lock()
	r.frames = append(r.frames, f)
	on := r.onFrame
	r.mu.Unlock()
	if on != nil {
		on(f)
	}
	return r.fail
}

func (r *recorder) all() []frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]frame(nil), r.frames...)
}

// request builds a request for a built-in tool with the DEFAULT privilege and the given
// worktree.
func request(name, worktree, args string) tools.Request {
	return tools.Request{
		CallID: "tool-test", ProviderID: tools.BuiltinProviderID, ToolName: name,
		ContentType: "application/json", Args: []byte(args), Worktree: worktree, Attempt: 1,
		Policy: tool.Policy{Timeout: time.Minute, Network: tool.NetworkDenyAll, Privilege: tool.PrivilegeDefault},
	}
}

// wantCode fails the test unless err is a *tool.Error with code (and, when given, a
// message containing want).
func wantCode(t *testing.T, err error, code tool.Code, want string) {
	t.Helper()
	if tool.CodeOf(err) != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
	if want != "" && !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

// checkOutput fails the test unless res is JSON that satisfies the tool's output schema.
func checkOutput(t *testing.T, p *Provider, name string, res tools.Result) {
	t.Helper()
	if res.ContentType != ContentTypeJSON {
		t.Fatalf("content type = %q", res.ContentType)
	}
	d := p.descs[name]
	// ValidateArgs checks a document against a descriptor's input schema; a descriptor whose
	// input schema is the output schema checks the result.
	asInput := &connectorpb.ToolDescriptor{ToolName: name, InputSchema: d.GetOutputSchema()}
	if err := tool.ValidateArgs(asInput, ContentTypeJSON, res.Data); err != nil {
		t.Fatalf("the result %s does not satisfy the output schema: %v", res.Data, err)
	}
}

func decode[T any](t *testing.T, res tools.Result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(res.Data, &v); err != nil {
		t.Fatalf("result %s: %v", res.Data, err)
	}
	return v
}

func TestDescriptorsAreValid(t *testing.T) {
	p := New(Options{})
	ds := p.Descriptors()
	var names []string
	for _, d := range ds {
		names = append(names, d.GetToolName())
		if err := tool.ValidateDescriptor(d); err != nil {
			t.Errorf("%s: %v", d.GetToolName(), err)
		}
		if d.GetOutputSchema() == "" {
			t.Errorf("%s has no output schema", d.GetToolName())
		}
	}
	if got := strings.Join(names, ","); got != "echo,fs.list,fs.read,fs.write,process.run,sleep" {
		t.Errorf("tools = %s", got)
	}
	// The descriptors are copies.
	ds[0].ToolName = "changed"
	if p.Descriptors()[0].GetToolName() != "echo" {
		t.Error("Descriptors exposes the provider's own descriptors")
	}

	want := map[string]struct {
		idempotent, worktree bool
		effects              tool.SideEffects
	}{
		ToolFSRead:     {true, true, tool.SideEffectsRead},
		ToolFSWrite:    {true, true, tool.SideEffectsWrite},
		ToolFSList:     {true, true, tool.SideEffectsRead},
		ToolProcessRun: {false, true, tool.SideEffectsWrite},
		ToolEcho:       {true, false, tool.SideEffectsNone},
		ToolSleep:      {true, false, tool.SideEffectsNone},
	}
	for _, d := range p.Descriptors() {
		w := want[d.GetToolName()]
		if d.GetIdempotent() != w.idempotent || d.GetNeedsWorktree() != w.worktree || tool.SideEffectsOf(d) != w.effects {
			t.Errorf("%s: idempotent=%v needs_worktree=%v side_effects=%s", d.GetToolName(), d.GetIdempotent(), d.GetNeedsWorktree(), d.GetSideEffects())
		}
	}
}

// TestInputSchemas checks that each input schema takes the arguments the tool is meant to
// take and refuses what it is not.
func TestInputSchemas(t *testing.T) {
	p := New(Options{})
	tests := []struct {
		tool, args string
		ok         bool
	}{
		{ToolFSRead, `{"path":"a.txt"}`, true},
		{ToolFSRead, `{}`, false},
		{ToolFSRead, `{"path":""}`, false},
		{ToolFSRead, `{"path":"a","extra":1}`, false},
		{ToolFSWrite, `{"path":"a","content":"x"}`, true},
		{ToolFSWrite, `{"path":"a","content":"eA==","encoding":"base64","create_dirs":true}`, true},
		{ToolFSWrite, `{"path":"a","content":"x","encoding":"latin1"}`, false},
		{ToolFSWrite, `{"path":"a"}`, false},
		{ToolFSList, `{}`, true},
		{ToolFSList, `{"path":"sub"}`, true},
		{ToolProcessRun, `{"argv":["ls","-l"]}`, true},
		{ToolProcessRun, `{"argv":["cat"],"stdin":"hi"}`, true},
		{ToolProcessRun, `{"argv":[]}`, false},
		{ToolProcessRun, `{"argv":"ls"}`, false},
		{ToolEcho, `{"anything":[1,{"x":null}]}`, true},
		{ToolEcho, `[1]`, false},
		{ToolSleep, `{"ms":100}`, true},
		{ToolSleep, `{"ms":100,"tick_ms":10}`, true},
		{ToolSleep, `{"ms":-1}`, false},
		{ToolSleep, `{"ms":100,"tick_ms":1}`, false},
	}
	for _, tt := range tests {
		err := tool.ValidateArgs(p.descs[tt.tool], ContentTypeJSON, []byte(tt.args))
		if (err == nil) != tt.ok {
			t.Errorf("%s %s: err = %v, want ok=%v", tt.tool, tt.args, err, tt.ok)
		}
	}
}

func TestCallRefusals(t *testing.T) {
	p := New(Options{})
	ctx := context.Background()
	wt := t.TempDir()

	_, err := p.Call(ctx, request("nope", wt, `{}`), nil)
	wantCode(t, err, tool.CodeNotFound, `no tool "nope"`)

	req := request(ToolEcho, "", `{}`)
	req.ProviderID = "other"
	_, err = p.Call(ctx, req, nil)
	wantCode(t, err, tool.CodeNotFound, `provider "other"`)

	for _, name := range []string{ToolFSRead, ToolFSWrite, ToolFSList, ToolProcessRun} {
		_, err = p.Call(ctx, request(name, "", `{}`), nil)
		wantCode(t, err, tool.CodeWorktreeNotBound, "not bound to a worktree (§16)")
	}
	req = request(ToolEcho, "", `{}`)
	req.Policy.WorktreeRequired = true
	_, err = p.Call(ctx, req, nil)
	wantCode(t, err, tool.CodeWorktreeNotBound, "not bound to a worktree (§16)")

	_, err = p.Call(ctx, request(ToolFSRead, wt, `{"path":`), nil)
	wantCode(t, err, tool.CodeValidation, "do not decode")
	_, err = p.Call(ctx, request(ToolFSRead, wt, `{"path":"a","bogus":1}`), nil)
	wantCode(t, err, tool.CodeValidation, "bogus")
	_, err = p.Call(ctx, request(ToolFSRead, wt, `{"path":"a"} {}`), nil)
	wantCode(t, err, tool.CodeValidation, "trailing data")
	_, err = p.Call(ctx, request(ToolEcho, wt, `{"a":`), nil)
	wantCode(t, err, tool.CodeValidation, "not JSON")

	req = request(ToolEcho, "", `{}`)
	req.ContentType = "text/plain"
	_, err = p.Call(ctx, req, nil)
	wantCode(t, err, tool.CodeValidation, "JSON arguments")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Call(cancelled, request(ToolEcho, "", `{}`), nil)
	wantCode(t, err, tool.CodeCancelled, "")

	_, err = p.Call(ctx, request(ToolFSList, wt+"/missing", `{}`), nil)
	wantCode(t, err, tool.CodeInternal, "opening the bound worktree")
}

func TestEcho(t *testing.T) {
	p := New(Options{})
	args := `{"a": [1, 2.5, "x"], "b": {"c": null}}`
	res, err := p.Call(context.Background(), request(ToolEcho, "", args), nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Data) != args {
		t.Errorf("echo = %s, want %s", res.Data, args)
	}
	checkOutput(t, p, ToolEcho, res)

	res, err = p.Call(context.Background(), request(ToolEcho, "", ""), nil)
	if err != nil || string(res.Data) != "{}" {
		t.Errorf("echo of no arguments = %s, %v", res.Data, err)
	}
}

func TestSleepTicks(t *testing.T) {
	p := New(Options{})
	rec := &recorder{}
	res, err := p.Call(context.Background(), request(ToolSleep, "", `{"ms":250,"tick_ms":50}`), rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, p, ToolSleep, res)
	if got := decode[sleepResult](t, res); got.SleptMS < 250 {
		t.Errorf("slept_ms = %d, want at least 250", got.SleptMS)
	}
	frames := rec.all()
	if len(frames) == 0 {
		t.Fatal("no tick frames")
	}
	last := int64(-1)
	for _, f := range frames {
		if f.contentType != ContentTypeJSON {
			t.Fatalf("frame content type %q", f.contentType)
		}
		var tick sleepTick
		if err := json.Unmarshal([]byte(f.data), &tick); err != nil {
			t.Fatalf("frame %q: %v", f.data, err)
		}
		if tick.ElapsedMS < last {
			t.Errorf("ticks out of order: %d after %d", tick.ElapsedMS, last)
		}
		last = tick.ElapsedMS
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	p := New(Options{})

	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{onFrame: func(frame) { cancel() }}
	_, err := p.Call(ctx, request(ToolSleep, "", `{"ms":60000,"tick_ms":10}`), rec.emit)
	wantCode(t, err, tool.CodeCancelled, "")

	ctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	_, err = p.Call(ctx, request(ToolSleep, "", `{"ms":60000}`), nil)
	wantCode(t, err, tool.CodeToolTimeout, "deadline")

	rec = &recorder{fail: context.Canceled}
	_, err = p.Call(context.Background(), request(ToolSleep, "", `{"ms":60000,"tick_ms":10}`), rec.emit)
	wantCode(t, err, tool.CodeCancelled, "no more frames")

	_, err = p.Call(context.Background(), request(ToolSleep, "", `{}`), nil)
	wantCode(t, err, tool.CodeValidation, "ms must be")
}
