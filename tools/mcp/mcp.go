// Package mcp imports the tools of a Model Context Protocol server as SW4RM tool descriptors
// (§18.1: "MCP providers SHOULD expose a manifest and JSON schemas per the Model Context
// Protocol"; §22) and calls them. It is a thin layer over the official Go SDK
// (github.com/modelcontextprotocol/go-sdk): the SDK speaks the protocol — initialization,
// pagination, cancellation — and this package maps its types to SW4RM's and its failures to
// the structured codes of §18.3. It does I/O and is for activities, not workflow code.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// ClientName and ClientVersion identify SW4RM to the MCP servers it connects to.
const (
	ClientName    = "sw4rm"
	ClientVersion = "0.1.0"
)

// Server says how to reach one MCP server: a command line (stdio transport) or a URL
// (streamable HTTP transport), exactly one of them.
type Server struct {
	// Command is the server's command line, program first; its stdin and stdout carry the
	// protocol.
	Command []string
	// Env is the command's environment (nil: the current process's).
	Env []string
	// Dir is the command's working directory (empty: the current one).
	Dir string
	// StopTimeout is how long closing the session waits for the command to exit once its
	// stdin is closed, before it is sent SIGTERM, then SIGKILL after as long again (0: the
	// SDK's default, 5 s). A server still busy with a cancelled call may take that long.
	StopTimeout time.Duration
	// IsolateNetwork starts the command in a network namespace of its own, empty but for a
	// loopback that is down (Linux; elsewhere the server is not started): what a server
	// declared network=DENY_ALL gets, so the declaration is enforced rather than trusted.
	IsolateNetwork bool
	// Sandbox, when set, confines a stdio server's process (confineServer); nil: confined
	// only by its arguments.
	Sandbox *sandbox.Policy
	// Worktree is the worktree a per-worktree server serves (ServerFor sets it), which its
	// sandbox lets it write.
	Worktree string
	// URL is the server's streamable HTTP endpoint.
	URL string
	// HTTPClient makes the HTTP requests (nil: http.DefaultClient).
	HTTPClient *http.Client
}

// transport builds the SDK transport for s.
func (s Server) transport(ctx context.Context) (sdk.Transport, error) {
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return nil, tool.Errorf(tool.CodeValidation, "an MCP server has either a command line or a URL, not both")
	case len(s.Command) > 0:
		if strings.TrimSpace(s.Command[0]) == "" {
			return nil, tool.Errorf(tool.CodeValidation, "the MCP server's command line names no program")
		}
		// The command lives as long as the session: Close ends it, not ctx.
		cmd := exec.CommandContext(context.WithoutCancel(ctx), s.Command[0], s.Command[1:]...) //nolint:gosec // the operator configures the server's command line
		cmd.Env = s.Env
		cmd.Dir = s.Dir
		if s.IsolateNetwork {
			if err := isolateNetwork(cmd); err != nil {
				return nil, err
			}
		}
		return &sdk.CommandTransport{Command: cmd, TerminateDuration: s.StopTimeout}, nil
	case s.URL != "":
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return nil, tool.Errorf(tool.CodeValidation, "the MCP server URL %q is not http or https", s.URL)
		}
		return &sdk.StreamableClientTransport{Endpoint: s.URL, HTTPClient: s.HTTPClient}, nil
	}
	return nil, tool.Errorf(tool.CodeValidation, "an MCP server needs a command line or a URL")
}

// Client is a session with one MCP server. It is safe for concurrent use: the SDK
// multiplexes calls over the session.
type Client struct {
	session *sdk.ClientSession
	// progress routes the server's progress notifications to the call that asked for them,
	// by progress token.
	progress progressRoutes
	// done is closed when the session has ended — closed by Close, or by the server (a
	// stdio server's process exited, an HTTP server went away).
	done chan struct{}
	// broken is set when a call failed because the connection was lost: the session may not
	// have noticed its end yet, but it can make no more calls.
	broken atomic.Bool
	// cpu measures a stdio server's processes, for budget_cpu_ms; nil for other transports.
	cpu *cpuwatch.Watch
	// unconfine removes a sandboxed server's temporary directory and cgroup, once: when the
	// session ends, and at the latest when Close returns, so a process that exits right
	// after Close leaves nothing behind.
	unconfine func()
}

// Connect starts or reaches the server and completes MCP's initialization.
func Connect(ctx context.Context, s Server) (*Client, error) {
	t, err := s.transport(ctx)
	if err != nil {
		return nil, err
	}
	cleanup, err := s.confineServer(t) // Landlock and resource limits (sandbox.go)
	if err != nil {
		return nil, err
	}
	w := watchServer(t) // budget_cpu_ms measures a stdio server's processes (cpu.go)
	c, err := ConnectTransport(ctx, t)
	if err != nil {
		w.Close()
		cleanup()
		return nil, err
	}
	c.unconfine = sync.OnceFunc(cleanup)
	go func() { <-c.done; c.unconfine() }()
	c.cpu = serverStarted(t, w)
	return c, nil
}

// ConnectTransport connects over any SDK transport — an in-memory one in tests, or one the
// caller configured itself.
func ConnectTransport(ctx context.Context, t sdk.Transport) (*Client, error) {
	cl := &Client{done: make(chan struct{})}
	opts := &sdk.ClientOptions{
		// No roots capability: a server that takes its allowed directories from the client's
		// roots (the filesystem server does) keeps those of its command line, which the
		// operator configured, and nothing the client says can widen them.
		Capabilities: &sdk.ClientCapabilities{},
	}
	if _, ok := t.(*sdk.StreamableClientTransport); ok {
		// Its connection carries hooks private to the SDK that a wrapper would hide, so
		// progress comes through the SDK's handler: a notification sent just before the
		// result may then be handled after the call returned, and dropped.
		opts.ProgressNotificationHandler = cl.progress.handle
	} else {
		t = &progressTransport{Transport: t, routes: &cl.progress}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: ClientName, Version: ClientVersion}, opts)
	cs, err := c.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to the MCP server: %w", err)
	}
	cl.session = cs
	go func() {
		_ = cs.Wait()
		close(cl.done)
	}()
	return cl, nil
}

// Close ends the session; a stdio server's process is stopped, and with a cgroup whatever it
// left running too.
func (c *Client) Close() error {
	err := c.session.Close()
	c.cpu.Close()
	if c.unconfine != nil {
		c.unconfine()
	}
	return err
}

// Done is closed once the session has ended, by Close or by the server: a Client whose Done
// is closed can make no more calls.
func (c *Client) Done() <-chan struct{} { return c.done }

// alive reports whether the session can still make calls.
func (c *Client) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return !c.broken.Load()
	}
}

// Options are what a provider's configuration says about all its tools, since MCP does not
// describe them.
type Options struct {
	// NeedsWorktree marks every tool as needing the caller's worktree (§16) — e.g. a
	// filesystem server rooted in it.
	NeedsWorktree bool
	// DefaultTimeoutS is every tool's default_timeout_s (0: the policy default).
	DefaultTimeoutS uint32
	// MaxConcurrency is every tool's max_concurrency (0: no limit).
	MaxConcurrency uint32
}

// Skipped is a tool the server lists that cannot be imported, and why.
type Skipped struct {
	// Name is the tool's name as the server gave it.
	Name string
	// Reason says what is wrong with it.
	Reason string
}

// Import is the result of listing a server's tools.
type Import struct {
	// Tools are the descriptors, in the server's order.
	Tools []*connectorpb.ToolDescriptor
	// Skipped are the tools that were left out, so one bad tool does not hide the others.
	Skipped []Skipped
}

// ListTools lists the server's tools (every page of tools/list) and maps each to a
// descriptor with Descriptor; tools whose descriptor is invalid (tool.ValidateDescriptor) are
// skipped and reported.
func (c *Client) ListTools(ctx context.Context, o Options) (Import, error) {
	var imp Import
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			return Import{}, classify(ctx, "listing the MCP server's tools", err)
		}
		d, derr := Descriptor(t, o)
		if derr == nil {
			derr = tool.ValidateDescriptor(d)
		}
		if derr != nil {
			imp.Skipped = append(imp.Skipped, Skipped{Name: t.Name, Reason: derr.Error()})
			continue
		}
		imp.Tools = append(imp.Tools, d)
	}
	return imp, nil
}

// Descriptor maps an MCP tool to a descriptor (§18.1):
//   - tool_name, input_schema, output_schema: the tool's name and schemas, as JSON;
//   - idempotent: readOnlyHint or idempotentHint (a tool that changes nothing is safe to
//     repeat);
//   - side_effects: "read" when readOnlyHint; else "write" when openWorldHint is false (it
//     acts on a closed local domain); else "external" — MCP's defaults (no annotations)
//     assume a tool that writes to an open world;
//   - needs_worktree, default_timeout_s, max_concurrency: from o.
//
// destructiveHint does not change the mapping: every non-read-only tool is already never
// retried unless idempotentHint says repeating it is harmless. Annotations are hints from
// the server, not guarantees; they are trusted only as far as the operator trusts the
// server they configured.
func Descriptor(t *sdk.Tool, o Options) (*connectorpb.ToolDescriptor, error) {
	in, err := schemaJSON(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("its inputSchema: %w", err)
	}
	if in == "" {
		return nil, errors.New("it has no inputSchema")
	}
	out, err := schemaJSON(t.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("its outputSchema: %w", err)
	}
	d := &connectorpb.ToolDescriptor{
		ToolName:        t.Name,
		InputSchema:     in,
		OutputSchema:    out,
		NeedsWorktree:   o.NeedsWorktree,
		DefaultTimeoutS: o.DefaultTimeoutS,
		MaxConcurrency:  o.MaxConcurrency,
		SideEffects:     string(tool.SideEffectsExternal),
	}
	a := t.Annotations
	if a == nil {
		return d, nil
	}
	d.Idempotent = a.ReadOnlyHint || a.IdempotentHint
	switch {
	case a.ReadOnlyHint:
		d.SideEffects = string(tool.SideEffectsRead)
	case a.OpenWorldHint != nil && !*a.OpenWorldHint:
		d.SideEffects = string(tool.SideEffectsWrite)
	}
	return d, nil
}

// schemaJSON renders a schema the SDK decoded (a map) as compact JSON; "" for none.
func schemaJSON(s any) (string, error) {
	if s == nil {
		return "", nil
	}
	if raw, ok := s.(json.RawMessage); ok && len(raw) == 0 {
		return "", nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	if string(b) == "null" {
		return "", nil
	}
	return string(b), nil
}
