package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// fakeServers stands in for the processes an Executor starts: each connect builds an
// in-memory MCP server that knows the command line it was "started" with, and remembers it.
type fakeServers struct {
	t     *testing.T
	mu    sync.Mutex
	dials []string
	conns []*rawConn
	// started and stopped report the "wait" tool's start and the end of its context.
	started, stopped chan string
}

func newFakeServers(t *testing.T) *fakeServers {
	return &fakeServers{t: t, started: make(chan string, 16), stopped: make(chan string, 16)}
}

type progressIn struct {
	Steps int  `json:"steps,omitempty"`
	Wait  bool `json:"wait,omitempty"`
}

func (f *fakeServers) server(label string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "fake", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "where", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: label}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "denied", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "Access denied - path outside allowed directories: /etc/x"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "disk full"}}}, nil
		})
	// progress sends steps notifications, then returns {"steps":n}, or with wait, waits
	// until its context ends.
	sdk.AddTool(s, &sdk.Tool{Name: "progress"},
		func(ctx context.Context, req *sdk.CallToolRequest, in progressIn) (*sdk.CallToolResult, map[string]int, error) {
			for i := 1; i <= in.Steps; i++ {
				err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i)})
				if err != nil {
					return nil, nil, err
				}
			}
			if in.Wait {
				f.started <- label
				<-ctx.Done()
				f.stopped <- label
				return nil, nil, ctx.Err()
			}
			return nil, map[string]int{"steps": in.Steps}, nil
		})
	return s
}

func (f *fakeServers) connect(ctx context.Context, s Server) (*Client, error) {
	label := strings.Join(s.Command, " ")
	ct, st := sdk.NewInMemoryTransports()
	rc := &rawConn{Transport: st}
	ss, err := f.server(label).Connect(context.WithoutCancel(ctx), rc, nil)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.dials = append(f.dials, label)
	f.conns = append(f.conns, rc)
	f.mu.Unlock()
	f.t.Cleanup(func() { _ = ss.Close() })
	return ConnectTransport(ctx, ct)
}

// rawConn keeps the server's end of the connection, so that a test can cut it the way a
// process that exits does — without the server's graceful close, which waits for its
// handlers.
type rawConn struct {
	sdk.Transport
	conn sdk.Connection
}

func (r *rawConn) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	r.conn = c
	return c, err
}

func (f *fakeServers) dialed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.dials...)
}

// kill cuts the i-th server's connection, as a server process that exits.
func (f *fakeServers) kill(i int) {
	f.mu.Lock()
	rc := f.conns[i]
	f.mu.Unlock()
	_ = rc.conn.Close()
}

// newTestExecutor is an Executor of the provider configured as cfg, on fake servers.
func newTestExecutor(t *testing.T, cfg string) (*Executor, *fakeServers) {
	t.Helper()
	ps, err := ParseProviders(cfg)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	f := newFakeServers(t)
	e := NewExecutor(ps[0])
	e.connect = f.connect
	t.Cleanup(func() { _ = e.Close() })
	return e, f
}

// open is a policy every posture allows.
var open = tool.Policy{Network: tool.NetworkFullAccess}

func request(toolName, args string, p tool.Policy, worktree string) tools.Request {
	return tools.Request{CallID: "c1", ToolName: toolName, ContentType: "application/json", Args: []byte(args), Policy: p, Worktree: worktree, Attempt: 1}
}

// frames collects what a call emits.
type frames struct {
	mu   sync.Mutex
	data []string
	// fail, when set, is what emit answers from the n-th frame on (1-based).
	failFrom int
}

func (fr *frames) emit(_ context.Context, contentType string, data []byte) error {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if contentType != ProgressContentType {
		return fmt.Errorf("content type %q", contentType)
	}
	fr.data = append(fr.data, string(data))
	if fr.failFrom > 0 && len(fr.data) >= fr.failFrom {
		return errors.New("the call was cancelled")
	}
	return nil
}

func (fr *frames) all() []string {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return append([]string(nil), fr.data...)
}

func noFrames(context.Context, string, []byte) error {
	return errors.New("no frame expected")
}

func TestExecutorNetworkPosture(t *testing.T) {
	tests := []struct {
		name, options string
		policy        tool.NetworkPolicy
		refused       string // "" = allowed
	}{
		{"undeclared posture, FULL_ACCESS call", "", tool.NetworkFullAccess, ""},
		{"undeclared posture, DENY_ALL call", "", tool.NetworkDenyAll, "declares no network posture"},
		{"undeclared posture, no policy is DENY_ALL", "", "", "network_policy DENY_ALL"},
		{"undeclared posture, EGRESS_UNRESTRICTED call", "", tool.NetworkEgressUnrestricted, "declares no network posture"},
		{"DENY_ALL posture, DENY_ALL call", "[network=DENY_ALL]", tool.NetworkDenyAll, ""},
		{"DENY_ALL posture, looser call", "[network=DENY_ALL]", tool.NetworkEgressRestricted, ""},
		{"EGRESS_RESTRICTED posture, same", "[network=EGRESS_RESTRICTED]", tool.NetworkEgressRestricted, ""},
		{"EGRESS_RESTRICTED posture, DENY_ALL call", "[network=EGRESS_RESTRICTED]", tool.NetworkDenyAll, "up to EGRESS_RESTRICTED"},
		{"EGRESS_UNRESTRICTED posture, EGRESS_RESTRICTED call", "[network=EGRESS_UNRESTRICTED]", tool.NetworkEgressRestricted, "up to EGRESS_UNRESTRICTED"},
		{"FULL_ACCESS declared, EGRESS_UNRESTRICTED call", "[network=FULL_ACCESS]", tool.NetworkEgressUnrestricted, "up to FULL_ACCESS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newTestExecutor(t, "p"+tt.options+"=stdio:srv")
			r, err := e.Call(t.Context(), request("where", "{}", tool.Policy{Network: tt.policy}, ""), noFrames)
			if tt.refused == "" {
				require.NoError(t, err)
				assert.JSONEq(t, `[{"type":"text","text":"srv"}]`, string(r.Data))
				return
			}
			assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err), "err %v", err)
			assert.ErrorContains(t, err, tt.refused)
			assert.ErrorContains(t, err, "cannot confine an MCP server per call")
			assert.Empty(t, f.dialed(), "a refused call starts no server")
		})
	}
	e, f := newTestExecutor(t, "p=stdio:srv")
	_, err := e.Call(t.Context(), request("where", "{}", tool.Policy{Network: "SOME"}, ""), noFrames)
	assert.Equal(t, tool.CodeValidation, tool.CodeOf(err), "err %v", err)
	e.p.Network = "SOME" // only a Provider built by hand can hold it
	_, err = e.Call(t.Context(), request("where", "{}", open, ""), noFrames)
	assert.Equal(t, tool.CodeInternal, tool.CodeOf(err), "err %v", err)
	assert.Empty(t, f.dialed())
}

func TestExecutorResults(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv one")
	ctx := t.Context()

	r, err := e.Call(ctx, request("where", "{}", open, ""), noFrames)
	require.NoError(t, err)
	assert.Equal(t, "application/json", r.ContentType)
	assert.JSONEq(t, `[{"type":"text","text":"srv one"}]`, string(r.Data), "no structured content: the content blocks")

	r, err = e.Call(ctx, request("progress", `{"steps":0}`, open, ""), noFrames)
	require.NoError(t, err)
	assert.JSONEq(t, `{"steps":0}`, string(r.Data), "the structured content when there is one")

	_, err = e.Call(ctx, request("fail", "{}", open, ""), noFrames)
	assert.Equal(t, tool.CodeToolFailed, tool.CodeOf(err))
	assert.ErrorContains(t, err, "disk full")

	_, err = e.Call(ctx, request("denied", "{}", open, ""), noFrames)
	assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err), "a tool's own access denial: %v", err)
	assert.ErrorContains(t, err, "outside allowed directories")

	_, err = e.Call(ctx, request("nope", "{}", open, ""), noFrames)
	assert.Equal(t, tool.CodeValidation, tool.CodeOf(err), "an unknown tool: %v", err)

	mine := request("where", "{}", open, "")
	mine.ProviderID = "p"
	_, err = e.Call(ctx, mine, noFrames)
	require.NoError(t, err)
	mine.ProviderID = "q"
	_, err = e.Call(ctx, mine, noFrames)
	assert.Equal(t, tool.CodeInternal, tool.CodeOf(err), "a call for another provider: %v", err)

	assert.Equal(t, []string{"srv one"}, f.dialed(), "every call shares one session")
}

func TestExecutorProgressFrames(t *testing.T) {
	e, _ := newTestExecutor(t, "p=stdio:srv")
	var fr frames
	r, err := e.Call(t.Context(), request("progress", `{"steps":3}`, open, ""), fr.emit)
	require.NoError(t, err)
	assert.JSONEq(t, `{"steps":3}`, string(r.Data))
	got := fr.all()
	require.Len(t, got, 3, "one frame per progress notification, all before the result")
	for i, d := range got {
		assert.JSONEq(t, fmt.Sprintf(`{"progress":%d,"total":3,"message":"step %d"}`, i+1, i+1), d)
	}
}

func TestExecutorCancelAndDeadline(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv")

	// Cancelled after the first frame: CANCELLED, and the server is told.
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan struct{})
	var once sync.Once
	emit := func(context.Context, string, []byte) error {
		once.Do(func() { close(first) })
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Call(ctx, request("progress", `{"steps":1,"wait":true}`, open, ""), emit)
		done <- err
	}()
	<-first
	cancel()
	err := <-done
	assert.Equal(t, tool.CodeCancelled, tool.CodeOf(err), "err %v", err)
	assert.Equal(t, "srv", <-f.stopped, "the server's handler saw notifications/cancelled")

	// A deadline: TOOL_TIMEOUT.
	dctx, dcancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer dcancel()
	_, err = e.Call(dctx, request("progress", `{"wait":true}`, open, ""), noFrames)
	assert.Equal(t, tool.CodeToolTimeout, tool.CodeOf(err), "err %v", err)
	<-f.stopped

	// The session survives both.
	_, err = e.Call(t.Context(), request("where", "{}", open, ""), noFrames)
	require.NoError(t, err)
	assert.Len(t, f.dialed(), 1)
}

func TestExecutorEmitFailureStopsTheTool(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv")
	fr := frames{failFrom: 2}
	_, err := e.Call(t.Context(), request("progress", `{"steps":3,"wait":true}`, open, ""), fr.emit)
	assert.Equal(t, tool.CodeCancelled, tool.CodeOf(err), "err %v", err)
	assert.ErrorContains(t, err, "takes no more frames")
	assert.Len(t, fr.all(), 2, "no frame after the one emit refused")
	assert.Equal(t, "srv", <-f.started)
	assert.Equal(t, "srv", <-f.stopped, "the tool was told to stop")
}

func TestExecutorSessionPerWorktree(t *testing.T) {
	e, f := newTestExecutor(t, "p[network=DENY_ALL]=stdio:srv --root={worktree}")
	deny := tool.Policy{Network: tool.NetworkDenyAll}
	where := func(worktree string) (string, error) {
		r, err := e.Call(t.Context(), request("where", "{}", deny, worktree), noFrames)
		return string(r.Data), err
	}

	_, err := where("")
	assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err))
	assert.ErrorContains(t, err, "not bound to a worktree")
	assert.Empty(t, f.dialed(), "no server is started for an unbound caller")

	for _, wt := range []string{"/w/a", "/w/b", "/w/a", "/w/b/", "/w/a"} {
		got, err := where(wt)
		require.NoError(t, err)
		assert.Contains(t, got, "srv --root="+strings.TrimSuffix(wt, "/"), "the call reached its own worktree's server")
	}
	assert.Equal(t, []string{"srv --root=/w/a", "srv --root=/w/b"}, f.dialed(), "one server per worktree, reused")
}

func TestExecutorSharedSession(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv")
	var wg sync.WaitGroup
	for _, wt := range []string{"", "/w/a", "/w/b", "/w/c"} {
		wg.Go(func() {
			_, err := e.Call(t.Context(), request("where", "{}", open, wt), noFrames)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, []string{"srv"}, f.dialed(), "concurrent first calls start one server, and every worktree shares it")
}

func TestExecutorReconnects(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv")
	ctx := t.Context()

	// The server dies between calls: the next call starts a new one.
	_, err := e.Call(ctx, request("where", "{}", open, ""), noFrames)
	require.NoError(t, err)
	f.kill(0)
	<-e.sessions[""].client.Done() // the end the executor checks before reusing a session
	_, err = e.Call(ctx, request("where", "{}", open, ""), noFrames)
	require.NoError(t, err)
	assert.Len(t, f.dialed(), 2)

	// The server dies during a call: the call fails, and the next one starts a new server
	// without waiting for anything.
	done := make(chan error, 1)
	go func() {
		_, err := e.Call(ctx, request("progress", `{"wait":true}`, open, ""), noFrames)
		done <- err
	}()
	<-f.started
	f.kill(1)
	err = <-done
	assert.Equal(t, tool.CodeInternal, tool.CodeOf(err), "a lost server is a transient failure: %v", err)
	assert.ErrorContains(t, err, "session ended during the call")
	_, err = e.Call(ctx, request("where", "{}", open, ""), noFrames)
	require.NoError(t, err)
	assert.Len(t, f.dialed(), 3)
}

func TestExecutorIdleSessionsEnd(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv {worktree}")
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	e.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	call := func(wt string) {
		_, err := e.Call(t.Context(), request("where", "{}", open, wt), noFrames)
		require.NoError(t, err)
	}

	call("/w/a")
	a := e.sessions["/w/a"].client
	advance(SessionIdleTimeout / 2)
	call("/w/b")
	advance(SessionIdleTimeout/2 + time.Second)
	call("/w/b") // /w/a has been idle for longer than SessionIdleTimeout; /w/b has not
	<-a.Done()
	e.mu.Lock()
	_, aKept := e.sessions["/w/a"]
	_, bKept := e.sessions["/w/b"]
	e.mu.Unlock()
	assert.False(t, aKept, "the idle session was ended")
	assert.True(t, bKept)
	call("/w/a")
	assert.Equal(t, []string{"srv /w/a", "srv /w/b", "srv /w/a"}, f.dialed())
}

func TestExecutorClose(t *testing.T) {
	e, _ := newTestExecutor(t, "p=stdio:srv {worktree}")
	for _, wt := range []string{"/w/a", "/w/b"} {
		_, err := e.Call(t.Context(), request("where", "{}", open, wt), noFrames)
		require.NoError(t, err)
	}
	clients := []*Client{e.sessions["/w/a"].client, e.sessions["/w/b"].client}
	require.NoError(t, e.Close())
	for _, c := range clients {
		// Done closes once the SDK has seen its session end; the bound only keeps a session
		// that outlived Close from hanging the test.
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Error("a session outlived Close")
		}
	}
	_, err := e.Call(t.Context(), request("where", "{}", open, "/w/a"), noFrames)
	assert.Equal(t, tool.CodeInternal, tool.CodeOf(err))
	assert.ErrorContains(t, err, "closed")
}

func TestExecutorEndUnbound(t *testing.T) {
	e, f := newTestExecutor(t, "p=stdio:srv {worktree}")
	call := func(wt string) {
		_, err := e.Call(t.Context(), request("where", "{}", open, wt), noFrames)
		require.NoError(t, err)
	}
	call("/w/a")
	call("/w/b")
	call("/w/c")
	a, b := e.sessions["/w/a"].client, e.sessions["/w/b"].client

	// /w/a and /w/b are unbound; /w/c is bound (named unclean, as a path may be).
	var asked int
	ended, err := e.EndUnbound(t.Context(), func(context.Context) ([]string, error) {
		asked++
		return []string{"/w/c/", "/w/d"}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"/w/a", "/w/b"}, ended)
	assert.Equal(t, 1, asked)
	for _, c := range []*Client{a, b} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Error("the session of an unbound worktree was not ended")
		}
	}
	e.mu.Lock()
	assert.Equal(t, []string{"/w/c"}, slices.Sorted(maps.Keys(e.sessions)))
	e.mu.Unlock()

	// A session in use, or used while the bound worktrees were read, is kept.
	waitCtx, stopWait := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.Call(waitCtx, request("progress", `{"wait":true}`, open, "/w/a"), noFrames)
		done <- err
	}()
	<-f.started
	ended, err = e.EndUnbound(t.Context(), func(context.Context) ([]string, error) {
		call("/w/c") // used meanwhile: its bind may be newer than what was read
		return nil, nil
	})
	require.NoError(t, err)
	assert.Empty(t, ended, "a session with a call in flight, or used since the snapshot, is kept")

	// Nothing to end: bound is not asked; an error of bound is returned.
	e2, _ := newTestExecutor(t, "p=stdio:srv {worktree}")
	_, err = e2.EndUnbound(t.Context(), func(context.Context) ([]string, error) { t.Error("asked without sessions"); return nil, nil })
	require.NoError(t, err)
	call("/w/b")
	_, err = e.EndUnbound(t.Context(), func(context.Context) ([]string, error) { return nil, errors.New("store down") })
	assert.ErrorContains(t, err, "store down")

	// A shared server is not the worktrees' to end.
	s, _ := newTestExecutor(t, "p=stdio:srv")
	_, err = s.Call(t.Context(), request("where", "{}", open, "/w/a"), noFrames)
	require.NoError(t, err)
	ended, err = s.EndUnbound(t.Context(), func(context.Context) ([]string, error) { return nil, nil })
	require.NoError(t, err)
	assert.Empty(t, ended)
	assert.Len(t, s.sessions, 1)
	stopWait()
	assert.Equal(t, tool.CodeCancelled, tool.CodeOf(<-done))
}
