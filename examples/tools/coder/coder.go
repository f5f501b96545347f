// Package coder is the tools example (examples/tools): an agent fixes a failing test in its
// own worktree through tool calls alone — it reads and edits files through an MCP
// filesystem server confined to the worktree, and runs the tests through the built-in
// process tool (docs/tools.md).
package coder

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
)

// The names the example expects of its server (README.md): the repository holding the
// seeded module, and the MCP filesystem server's provider id.
const (
	// RepoID is the repository the agent binds a worktree of (SW4RM_REPOS=greet=<dir>).
	RepoID = "greet"
	// FSProvider is the MCP filesystem server, started per worktree
	// (SW4RM_MCP_SERVERS='fs[network=DENY_ALL]=stdio:mcp-server-filesystem {worktree}').
	FSProvider = "fs"
	// Builtin is the built-in provider.
	Builtin = "builtin"
)

//go:embed seed
var seed embed.FS

// Seed makes dir a git repository holding the example's Go module, whose test fails: what
// the server's SW4RM_REPOS points at.
func Seed(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"go.mod", "greet.go", "greet_test.go"} {
		b, err := seed.ReadFile("seed/" + name + ".txt")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "."},
		{"-c", "user.name=sw4rm", "-c", "user.email=sw4rm@example.com", "commit", "-q", "-m", "greet: a module whose test fails"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// Options configure a run.
type Options struct {
	// Out receives the narration (nil: io.Discard).
	Out io.Writer
	// Timeout bounds each tool call.
	Timeout time.Duration
}

// Report is what a run saw.
type Report struct {
	// Agent is the agent's id and Worktree its worktree's path.
	Agent, Worktree string
	// FirstRun and SecondRun are the tests' outcomes before and after the fix: the error
	// code of the first ("TOOL_FAILED") and "" for a pass.
	FirstRun, SecondRun string
	// TestOutput is what the failing run printed.
	TestOutput string
	// Fixed is greet.go after the edit, read back through the filesystem server.
	Fixed string
	// Refused are the error codes of the escapes tried: the filesystem server's and the
	// built-in provider's.
	Refused map[string]string
	// Diff is `git diff --stat` in the worktree at the end.
	Diff string
	// Branch is the worktree's branch (sw4rm/fix-<agent>).
	Branch string
	// Unbound and Deregistered say that the cleanup unbound the agent and deregistered it.
	Unbound, Deregistered bool
}

// CleanupTimeout bounds Run's cleanup (unbind, deregister), which runs under a context of
// its own: Run's may be cancelled already.
const CleanupTimeout = 30 * time.Second

// Run connects to server as a new agent, binds a worktree of RepoID, and fixes the failing
// test through tool calls. Whatever happens — a failure, ctx cancelled — it then unbinds the
// worktree and deregisters the agent, so that the agent's lifecycle and binding workflows
// end and the server stops the filesystem server it started for the worktree; the worktree
// and its branch stay (docs/worktrees.md, "Unbind"). A cleanup that fails is part of the
// error returned.
func Run(ctx context.Context, server string, o Options) (rep Report, err error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	rep.Refused = map[string]string{}
	id := "coder-" + uuid.NewString()[:8]
	agent, err := sdk.Dial(server, id, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return rep, err
	}
	defer func() { _ = agent.Close() }()
	if err := agent.Register(ctx, &registrypb.AgentDescriptor{Name: "coder", Description: "fixes failing tests through tool calls",
		CommunicationClass: commonpb.CommunicationClass_STANDARD, Capabilities: []string{"code"}}); err != nil {
		return rep, fmt.Errorf("register: %w", err)
	}
	rep.Agent = id
	wt := wtsdk.New(agent)
	defer func() { err = errors.Join(err, cleanup(ctx, agent, wt, &rep, out)) }()
	err = story(ctx, agent, wt, o, out, &rep)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// A call cut short is a gRPC status; say why it was.
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return rep, err
}

// cleanup unbinds the agent — also after a failed bind, whose binding waits in BIND_FAILED
// for its retries — and deregisters it, under a context of its own.
func cleanup(ctx context.Context, agent *sdk.Agent, wt *wtsdk.Client, rep *Report, out io.Writer) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	var errs []error
	if err := wt.Unbind(cctx); err != nil {
		errs = append(errs, fmt.Errorf("unbind: %w", err))
	} else {
		rep.Unbound = true
		if rep.Worktree != "" {
			fmt.Fprintf(out, "\nagent %s unbound; its worktree stays in %s (branch %s)\n", rep.Agent, rep.Worktree, rep.Branch)
		}
	}
	if err := agent.Deregister(cctx, "tools example finished"); err != nil {
		errs = append(errs, fmt.Errorf("deregister %s: %w", rep.Agent, err))
	} else {
		rep.Deregistered = true
		fmt.Fprintf(out, "agent %s deregistered\n", rep.Agent)
	}
	return errors.Join(errs...)
}

// story is the example, top to bottom, once the agent is registered.
func story(ctx context.Context, agent *sdk.Agent, wt *wtsdk.Client, o Options, out io.Writer, rep *Report) error {
	id := rep.Agent
	st, err := wt.Bind(ctx, RepoID, "fix-"+id)
	if err != nil {
		return fmt.Errorf("bind a worktree of %s (is SW4RM_REPOS=%s=<dir> set on the server? `make dev` sets it; README.md): %w", RepoID, RepoID, err)
	}
	rep.Worktree, rep.Branch = st.Path, st.Branch
	fmt.Fprintf(out, "agent %s bound to worktree %s (branch %s)\n", id, st.Path, st.Branch)

	tc := tsdk.New(agent)
	for _, p := range []string{FSProvider, Builtin} {
		ds, err := tc.Tools(ctx, p)
		if err != nil {
			return fmt.Errorf("list the tools of %s (is the MCP filesystem server configured? `make dev` configures it when npm is installed; README.md): %w", p, err)
		}
		names := make([]string, len(ds))
		for i, d := range ds {
			names[i] = d.GetToolName()
		}
		fmt.Fprintf(out, "provider %s offers %s\n", p, strings.Join(names, ", "))
	}

	// Read the code through the MCP filesystem server, rooted in the worktree.
	src, err := mcpText(ctx, tc, "read_text_file", map[string]any{"path": "greet.go"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n--- greet.go, read through %s/read_text_file\n%s", FSProvider, src)

	// Run the tests through the built-in process tool: they fail.
	rep.FirstRun, rep.TestOutput, err = goTest(ctx, tc, o, out)
	if err != nil {
		return err
	}
	if rep.FirstRun == "" {
		return errors.New("the seeded test passed before the fix: is the repository the example's seed?")
	}

	// Fix it through the filesystem server's edit_file.
	if _, err := mcpText(ctx, tc, "edit_file", map[string]any{"path": "greet.go",
		"edits": []map[string]string{{"oldText": `"Hello, " + name`, "newText": `"Hello, " + name + "!"`}}}); err != nil {
		return err
	}
	if rep.Fixed, err = mcpText(ctx, tc, "read_text_file", map[string]any{"path": "greet.go"}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n--- greet.go after %s/edit_file\n%s", FSProvider, rep.Fixed)

	if rep.SecondRun, _, err = goTest(ctx, tc, o, out); err != nil {
		return err
	}

	// Confinement: neither provider reaches outside the worktree.
	_, err = mcpText(ctx, tc, "read_text_file", map[string]any{"path": "/etc/passwd"})
	rep.Refused[FSProvider] = tsdk.CodeOf(err)
	fmt.Fprintf(out, "\n%s/read_text_file /etc/passwd: %v\n", FSProvider, err)
	_, err = tc.Do(ctx, tsdk.Call{ProviderID: Builtin, ToolName: "fs.read", Args: map[string]any{"path": "../../../etc/passwd"}})
	rep.Refused[Builtin] = tsdk.CodeOf(err)
	fmt.Fprintf(out, "%s/fs.read ../../../etc/passwd: %v\n", Builtin, err)

	f, err := tc.Do(ctx, tsdk.Call{ProviderID: Builtin, ToolName: "process.run", Args: map[string]any{"argv": []string{"git", "diff", "--stat"}},
		Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}})
	if err != nil {
		return fmt.Errorf("git diff: %w", err)
	}
	rep.Diff = stdoutOf(ctx, tc, f.GetCallId())
	fmt.Fprintf(out, "\ngit diff --stat in the worktree:\n%s", rep.Diff)
	return nil
}

// mcpText calls a filesystem server tool and returns its text.
func mcpText(ctx context.Context, tc *tsdk.Client, name string, args map[string]any) (string, error) {
	f, err := tc.Do(ctx, tsdk.Call{ProviderID: FSProvider, ToolName: name, Args: args,
		Policy: &toolpb.ExecutionPolicy{NetworkPolicy: "DENY_ALL"}})
	if err != nil {
		return "", err
	}
	return textOf(f.GetData()), nil
}

// textOf joins the text of an MCP result's content blocks, or returns the structured
// content's "content" field.
func textOf(data []byte) string {
	var structured struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(data, &structured) == nil && structured.Content != "" {
		return structured.Content
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(data, &blocks) == nil {
		var b strings.Builder
		for _, blk := range blocks {
			b.WriteString(blk.Text)
		}
		return b.String()
	}
	return string(data)
}

// goTest runs `go test ./...` in the worktree through the built-in process tool, streaming
// its output; it returns the error code ("" for a pass) and the output.
func goTest(ctx context.Context, tc *tsdk.Client, o Options, out io.Writer) (string, string, error) {
	argv := []string{"go", "test", "./..."}
	if cache := goCache(); cache != "" {
		// The machine's build cache, so that the first run in a new worktree does not
		// compile the standard library again.
		argv = append([]string{"env", "GOCACHE=" + cache, "GOTOOLCHAIN=local"}, argv...)
	}
	fmt.Fprintf(out, "\n$ go test ./...   (%s/process.run, privilege DEFAULT, network DENY_ALL)\n", Builtin)
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st, err := tc.Stream(cctx, tsdk.Call{ProviderID: Builtin, ToolName: "process.run", Args: map[string]any{"argv": argv},
		Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT", BudgetWallMs: uint64(o.Timeout.Milliseconds())}})
	if err != nil {
		return "", "", err
	}
	var text strings.Builder
	for {
		f, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", text.String(), err
		}
		if !f.GetFinal() {
			text.Write(f.GetData())
			_, _ = out.Write(f.GetData())
			continue
		}
		sum, err := tsdk.SummaryOf(f)
		if err != nil {
			return "", text.String(), err
		}
		fmt.Fprintf(out, "-> %s %s\n", sum.Status, sum.ErrorCode)
		return sum.ErrorCode, text.String(), nil
	}
	return "", text.String(), errors.New("the stream ended without its final frame")
}

// stdoutOf reads back the stdout frames of a finished call.
func stdoutOf(ctx context.Context, tc *tsdk.Client, callID string) string {
	st, err := tc.Resume(ctx, callID, 0)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for {
		f, err := st.Recv()
		if err != nil || f.GetFinal() {
			return b.String()
		}
		if strings.Contains(f.GetContentType(), "stream=stdout") {
			b.Write(f.GetData())
		}
	}
}

// goCache is this machine's Go build cache, "" when go is not here.
func goCache() string {
	b, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
