package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// serverEnv makes the test binary run as an MCP stdio server, so the stdio transport is
// tested against a real child process.
const serverEnv = "SW4RM_TEST_MCP_STDIO_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(burnServerEnv) == "1" {
		os.Exit(runBurnServer()) // a stdio server whose tools use CPU (cpu_test.go)
	}
	if os.Getenv(serverEnv) == "1" {
		if err := newServer(nil).Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// newServer builds an in-process MCP server with a few tools. waitStarted, when set, is
// told when "wait" starts; "wait" returns once its context is cancelled, which happens when
// the server receives notifications/cancelled, and reports that on waitCancelled.
func newServer(w *waiter) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "adds", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	closed := false
	s.AddTool(&sdk.Tool{
		Name:        "write_note",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Annotations: &sdk.ToolAnnotations{OpenWorldHint: &closed},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		if in.Text == "" {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "empty note"}}}, nil
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "noted: " + in.Text}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			if w != nil {
				close(w.started)
			}
			<-ctx.Done()
			if w != nil {
				close(w.cancelled)
			}
			return nil, ctx.Err()
		})
	// Not importable: "/" is not allowed in a tool_name, and the pattern does not compile.
	s.AddTool(&sdk.Tool{Name: "bad/name", InputSchema: json.RawMessage(`{"type":"object"}`)}, nil)
	s.AddTool(&sdk.Tool{Name: "bad_pattern", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}`)}, nil)
	return s
}

type waiter struct{ started, cancelled chan struct{} }

// connectInMemory connects a Client to newServer over the SDK's in-memory transport.
func connectInMemory(t *testing.T, w *waiter) *Client {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := newServer(w).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	c, err := ConnectTransport(ctx, ct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func checkImport(t *testing.T, imp Import) {
	t.Helper()
	byName := map[string]*connectorpb.ToolDescriptor{}
	var names []string
	for _, d := range imp.Tools {
		byName[d.GetToolName()] = d
		names = append(names, d.GetToolName())
		if err := tool.ValidateDescriptor(d); err != nil {
			t.Errorf("imported descriptor %s is invalid: %v", d.GetToolName(), err)
		}
		if !d.GetNeedsWorktree() || d.GetDefaultTimeoutS() != 20 || d.GetMaxConcurrency() != 2 {
			t.Errorf("%s: options not applied: %v", d.GetToolName(), d)
		}
	}
	if strings.Join(names, ",") != "add,wait,write_note" {
		t.Fatalf("imported %v, want add, wait, write_note", names)
	}
	add := byName["add"]
	if !add.GetIdempotent() || add.GetSideEffects() != "read" {
		t.Errorf("add: idempotent=%v side_effects=%q, want true read", add.GetIdempotent(), add.GetSideEffects())
	}
	if !strings.Contains(add.GetInputSchema(), `"a"`) || !strings.Contains(add.GetOutputSchema(), `"sum"`) {
		t.Errorf("add's schemas not imported: in=%s out=%s", add.GetInputSchema(), add.GetOutputSchema())
	}
	if err := tool.ValidateArgs(add, "", []byte(`{"a":"x","b":2}`)); tool.CodeOf(err) != tool.CodeValidation || !strings.Contains(err.Error(), "/a:") {
		t.Errorf("add's imported input schema does not check arguments: %v", err)
	}
	wn := byName["write_note"]
	if wn.GetIdempotent() || wn.GetSideEffects() != "write" {
		t.Errorf("write_note: idempotent=%v side_effects=%q, want false write", wn.GetIdempotent(), wn.GetSideEffects())
	}
	if w := byName["wait"]; w.GetIdempotent() || w.GetSideEffects() != "external" {
		t.Errorf("wait (no annotations): idempotent=%v side_effects=%q, want false external", w.GetIdempotent(), w.GetSideEffects())
	}
	var skipped []string
	for _, s := range imp.Skipped {
		skipped = append(skipped, s.Name)
		if !strings.Contains(s.Reason, "VALIDATION_ERROR") {
			t.Errorf("skipped %s without a validation reason: %q", s.Name, s.Reason)
		}
	}
	if strings.Join(skipped, ",") != "bad/name,bad_pattern" {
		t.Errorf("skipped %v, want bad/name, bad_pattern", skipped)
	}
}

var opts = Options{NeedsWorktree: true, DefaultTimeoutS: 20, MaxConcurrency: 2}

func TestListToolsInMemory(t *testing.T) {
	c := connectInMemory(t, nil)
	imp, err := c.ListTools(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkImport(t, imp)
}

func TestCallTool(t *testing.T) {
	c := connectInMemory(t, nil)
	ctx := context.Background()
	tests := []struct {
		name, tool, args string
		code             tool.Code
		data, text       string // substrings
	}{
		{"structured result", "add", `{"a":2,"b":3}`, "", `{"sum":5}`, `"sum":5`},
		{"text result", "write_note", `{"text":"hi"}`, "", `"text":"noted: hi"`, "noted: hi"},
		{"tool error", "write_note", `{"text":""}`, tool.CodeToolFailed, "", "empty note"},
		{"unknown tool", "nope", `{}`, tool.CodeValidation, "", ""},
		// The SDK reports arguments its schema refuses as a tool error (isError), as MCP asks.
		{"arguments refused by the tool", "add", `{"a":"x"}`, tool.CodeToolFailed, "", "want \"integer\""},
		{"arguments not JSON", "add", `{`, tool.CodeValidation, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.CallTool(ctx, tt.tool, json.RawMessage(tt.args))
			if tool.CodeOf(err) != tt.code {
				t.Fatalf("code %q (err %v), want %q", tool.CodeOf(err), err, tt.code)
			}
			if !strings.Contains(string(r.Data()), tt.data) {
				t.Errorf("data %s does not contain %s", r.Data(), tt.data)
			}
			if tt.code == tool.CodeToolFailed && !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not carry the tool's message %q", err, tt.text)
			} else if tt.code == "" && !strings.Contains(r.Text, tt.text) {
				t.Errorf("text %q does not contain %q", r.Text, tt.text)
			}
			if tt.code == "" && r.ContentType() != "application/json" {
				t.Errorf("content type %q", r.ContentType())
			}
		})
	}
}

func TestCallToolCancelTellsTheServer(t *testing.T) {
	w := &waiter{started: make(chan struct{}), cancelled: make(chan struct{})}
	c := connectInMemory(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, "wait", nil)
		done <- err
	}()
	<-w.started
	cancel()
	if err := <-done; tool.CodeOf(err) != tool.CodeCancelled {
		t.Fatalf("code %q (err %v), want CANCELLED", tool.CodeOf(err), err)
	}
	// The server's handler only returns when its context ends, which only the
	// notifications/cancelled the SDK sends can do; the bound only keeps a broken
	// notification from hanging the test.
	select {
	case <-w.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not told of the cancellation")
	}
	// The session survives a cancelled call.
	if _, err := c.CallTool(context.Background(), "add", json.RawMessage(`{"a":1,"b":1}`)); err != nil {
		t.Fatalf("call after cancel: %v", err)
	}
}

func TestCallToolDeadline(t *testing.T) {
	w := &waiter{started: make(chan struct{}), cancelled: make(chan struct{})}
	c := connectInMemory(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.CallTool(ctx, "wait", nil)
	if tool.CodeOf(err) != tool.CodeToolTimeout {
		t.Fatalf("code %q (err %v), want TOOL_TIMEOUT", tool.CodeOf(err), err)
	}
}

func TestStdioServer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Connect(ctx, Server{Command: []string{exe, "-test.run=^$"}, Env: append(os.Environ(), serverEnv+"=1")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	imp, err := c.ListTools(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkImport(t, imp)
	r, err := c.CallTool(ctx, "add", json.RawMessage(`{"a":40,"b":2}`))
	if err != nil || string(r.Data()) != `{"sum":42}` {
		t.Fatalf("add over stdio = %s, %v", r.Data(), err)
	}
}

func TestStreamableHTTPServer(t *testing.T) {
	srv := newServer(nil)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	ctx := context.Background()
	c, err := Connect(ctx, Server{URL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	imp, err := c.ListTools(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkImport(t, imp)
	r, err := c.CallTool(ctx, "write_note", json.RawMessage(`{"text":"over http"}`))
	if err != nil || r.Text != "noted: over http" {
		t.Fatalf("write_note over HTTP = %q, %v", r.Text, err)
	}
}

func TestServerConfigRefused(t *testing.T) {
	tests := []struct {
		name string
		s    Server
		want string
	}{
		{"neither", Server{}, "needs a command line or a URL"},
		{"both", Server{Command: []string{"x"}, URL: "http://h"}, "not both"},
		{"empty program", Server{Command: []string{" "}}, "names no program"},
		{"bad scheme", Server{URL: "ftp://h/mcp"}, "not http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Connect(context.Background(), tt.s)
			var te *tool.Error
			if !errors.As(err, &te) || te.Code != tool.CodeValidation || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want VALIDATION_ERROR containing %q", err, tt.want)
			}
		})
	}
}

func TestDescriptorMapping(t *testing.T) {
	yes, no := true, false
	schema := map[string]any{"type": "object"}
	tests := []struct {
		name       string
		a          *sdk.ToolAnnotations
		idempotent bool
		effects    string
	}{
		{"no annotations: MCP defaults", nil, false, "external"},
		{"read-only", &sdk.ToolAnnotations{ReadOnlyHint: true}, true, "read"},
		{"read-only, open world", &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &yes}, true, "read"},
		{"idempotent closed-world writer", &sdk.ToolAnnotations{IdempotentHint: true, OpenWorldHint: &no}, true, "write"},
		{"destructive open-world", &sdk.ToolAnnotations{DestructiveHint: &yes}, false, "external"},
		{"non-destructive open-world", &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}, false, "external"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Descriptor(&sdk.Tool{Name: "t", InputSchema: schema, Annotations: tt.a}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if d.GetIdempotent() != tt.idempotent || d.GetSideEffects() != tt.effects {
				t.Errorf("idempotent=%v side_effects=%q, want %v %q", d.GetIdempotent(), d.GetSideEffects(), tt.idempotent, tt.effects)
			}
			if d.GetInputSchema() != `{"type":"object"}` || d.GetOutputSchema() != "" {
				t.Errorf("schemas %q %q", d.GetInputSchema(), d.GetOutputSchema())
			}
		})
	}
	if _, err := Descriptor(&sdk.Tool{Name: "t"}, Options{}); err == nil || !strings.Contains(err.Error(), "no inputSchema") {
		t.Errorf("a tool without inputSchema: %v", err)
	}
}
