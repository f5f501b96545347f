// Package builtin is the built-in tool provider (§18): confined file tools and a process
// runner for agents that bring no tool provider of their own, plus two tools for tests and
// benchmarks. It is registered under tools.BuiltinProviderID ("builtin").
//
// Every file path goes through confine (§6.4, §16): a path that leaves the caller's
// worktree — "..", an absolute path elsewhere, a symbolic link out — is refused with
// PERMISSION_DENIED and confine's reason. Processes run in the worktree through
// confine.Command, under the call's execution policy (§18.5): MINIMAL privilege forbids them,
// budget_cpu_ms is watched while they run, and DENY_ALL gives them an empty network
// namespace. docs/tools.md ("The built-in provider") lists the tools and what each policy
// does to them.
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// The names of the built-in tools.
const (
	// ToolFSRead reads a file of the worktree.
	ToolFSRead = "fs.read"
	// ToolFSWrite writes a file of the worktree.
	ToolFSWrite = "fs.write"
	// ToolFSList lists a directory of the worktree.
	ToolFSList = "fs.list"
	// ToolProcessRun runs a process in the worktree.
	ToolProcessRun = "process.run"
	// ToolEcho answers its arguments.
	ToolEcho = "echo"
	// ToolSleep waits, emitting a frame per tick.
	ToolSleep = "sleep"
)

// Content types of the frames and results the provider produces.
const (
	// ContentTypeJSON is the content type of every result, and of sleep's tick frames.
	ContentTypeJSON = "application/json"
	// ContentTypeStdout is the content type of a frame of a process's standard output: the
	// bytes as the process wrote them. The stream parameter tells it from ContentTypeStderr,
	// so the data itself is never prefixed or rewritten.
	ContentTypeStdout = "text/plain; stream=stdout"
	// ContentTypeStderr is the content type of a frame of a process's standard error.
	ContentTypeStderr = "text/plain; stream=stderr"
)

// Defaults of Options.
const (
	// DefaultMaxFileBytes bounds what fs.read returns and fs.write accepts: 4 MiB.
	DefaultMaxFileBytes = 4 << 20
	// DefaultMaxListEntries bounds the entries fs.list returns.
	DefaultMaxListEntries = 10_000
	// DefaultChunkBytes bounds the data of one output frame of process.run.
	DefaultChunkBytes = 8 << 10
	// DefaultFlushInterval is how long process output may wait to fill a frame before it is
	// sent anyway.
	DefaultFlushInterval = 100 * time.Millisecond
	// DefaultCPUPollInterval is how often process.run samples the CPU time of the call's
	// processes against budget_cpu_ms.
	DefaultCPUPollInterval = 50 * time.Millisecond
	// DefaultStderrTailBytes is how much of the end of standard error a TOOL_FAILED message
	// quotes.
	DefaultStderrTailBytes = 2 << 10
)

// Options configures a Provider; a zero field takes its default.
type Options struct {
	// MaxFileBytes bounds the size of a file fs.read returns and fs.write accepts.
	MaxFileBytes int
	// MaxListEntries bounds the entries fs.list returns; past it the listing is truncated.
	MaxListEntries int
	// ChunkBytes bounds the data of one output frame of process.run.
	ChunkBytes int
	// FlushInterval is the longest process output waits to fill a frame.
	FlushInterval time.Duration
	// CPUPollInterval is how often the CPU budget is checked while a process runs.
	CPUPollInterval time.Duration
	// StderrTailBytes bounds the stderr tail quoted when a process fails.
	StderrTailBytes int
	// Audit is told of every path confine refuses (§19); nil: nobody.
	Audit confine.AuditFunc
	// Sandbox confines process.run's processes (package sandbox: Landlock and resource
	// limits); nil: sandbox.DefaultPolicy().
	Sandbox *sandbox.Policy
	// EgressAllow is the egress allowlist of process.run calls under network_policy
	// EGRESS_RESTRICTED (§18.5.2, ParseEgressAllow); empty: such calls are refused.
	EgressAllow []EgressRule
}

// Provider is the built-in tool provider. It holds no per-call state, so one Provider serves
// every call concurrently.
type Provider struct {
	opts  Options
	descs map[string]*connectorpb.ToolDescriptor
	run   map[string]func(context.Context, tools.Request, tools.Emit) (tools.Result, error)
}

var (
	_ tools.Executor  = (*Provider)(nil)
	_ tools.Describer = (*Provider)(nil)
)

// New returns the built-in provider.
func New(opts Options) *Provider {
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.MaxListEntries <= 0 {
		opts.MaxListEntries = DefaultMaxListEntries
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.CPUPollInterval <= 0 {
		opts.CPUPollInterval = DefaultCPUPollInterval
	}
	if opts.StderrTailBytes <= 0 {
		opts.StderrTailBytes = DefaultStderrTailBytes
	}
	if opts.Sandbox == nil {
		opts.Sandbox = defaultSandbox()
	}
	p := &Provider{opts: opts, descs: map[string]*connectorpb.ToolDescriptor{}}
	for _, d := range descriptors() {
		p.descs[d.GetToolName()] = d
	}
	p.run = map[string]func(context.Context, tools.Request, tools.Emit) (tools.Result, error){
		ToolFSRead:     p.fsRead,
		ToolFSWrite:    p.fsWrite,
		ToolFSList:     p.fsList,
		ToolProcessRun: p.processRun,
		ToolEcho:       p.echo,
		ToolSleep:      p.sleep,
	}
	return p
}

// Descriptors returns the descriptors of the built-in tools, sorted by name. They are
// copies: a caller may change them.
func (p *Provider) Descriptors() []*connectorpb.ToolDescriptor {
	out := make([]*connectorpb.ToolDescriptor, 0, len(p.descs))
	for _, d := range p.descs {
		out = append(out, proto.CloneOf(d))
	}
	slices.SortFunc(out, func(a, b *connectorpb.ToolDescriptor) int {
		return strings.Compare(a.GetToolName(), b.GetToolName())
	})
	return out
}

// Call runs one attempt of a built-in tool. Before the tool runs it refuses a call for
// another provider or an unknown tool (NOT_FOUND), non-JSON arguments (VALIDATION_ERROR),
// and a tool that needs a worktree when the caller is bound to none (PERMISSION_DENIED,
// §16). A nil emit drops the frames.
func (p *Provider) Call(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	if req.ProviderID != "" && req.ProviderID != tools.BuiltinProviderID {
		return tools.Result{}, tool.Errorf(tool.CodeNotFound, "provider %q is not the built-in provider %q", req.ProviderID, tools.BuiltinProviderID)
	}
	run, ok := p.run[req.ToolName]
	if !ok {
		return tools.Result{}, tool.Errorf(tool.CodeNotFound, "the built-in provider has no tool %q", req.ToolName)
	}
	if req.ContentType != "" && !tool.IsJSON(req.ContentType) {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q takes JSON arguments, not %q", req.ToolName, req.ContentType)
	}
	if (p.descs[req.ToolName].GetNeedsWorktree() || req.Policy.WorktreeRequired) && req.Worktree == "" {
		return tools.Result{}, tool.Errorf(tool.CodeWorktreeNotBound, "tool %q: the caller is not bound to a worktree (§16)", req.ToolName)
	}
	if err := ctx.Err(); err != nil {
		return tools.Result{}, ctxError(ctx, req.ToolName)
	}
	if emit == nil {
		emit = func(context.Context, string, []byte) error { return nil }
	}
	return run(ctx, req, emit)
}

// decodeArgs decodes a call's JSON arguments into v, refusing unknown fields and trailing
// data. The arguments were checked against the input schema before the call reached the
// provider; decoding still refuses what does not fit, rather than trusting that.
func decodeArgs(req tools.Request, v any) error {
	args := bytes.TrimSpace(req.Args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return tool.Errorf(tool.CodeValidation, "tool %q: the arguments do not decode: %v", req.ToolName, err)
	}
	if dec.More() {
		return tool.Errorf(tool.CodeValidation, "tool %q: trailing data after the arguments", req.ToolName)
	}
	return nil
}

// jsonResult encodes v as the call's JSON result.
func jsonResult(name string, v any) (tools.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: encoding the result: %v", name, err)
	}
	return tools.Result{ContentType: ContentTypeJSON, Data: b}, nil
}

// openWorktree opens the caller's worktree (Call has checked that there is one).
func (p *Provider) openWorktree(req tools.Request) (*confine.Root, error) {
	var opts []confine.Option
	if p.opts.Audit != nil {
		opts = append(opts, confine.WithAudit(p.opts.Audit))
	}
	root, err := confine.Open(req.Worktree, opts...)
	if err != nil {
		// The binding names a directory that cannot be opened: the server's state is
		// wrong, not the call.
		return nil, tool.Errorf(tool.CodeInternal, "tool %q: opening the bound worktree: %v", req.ToolName, err)
	}
	return root, nil
}

// fileError maps a file operation's failure: a confine refusal is PERMISSION_DENIED with
// confine's reason; a failure the filesystem reports about the path (missing, not a
// directory, ...) is the tool's own, TOOL_FAILED; anything else is INTERNAL_ERROR.
func fileError(name string, err error) error {
	var ce *confine.Error
	if errors.As(err, &ce) {
		return tool.Errorf(tool.CodePermissionDenied, "tool %q: %s %q: %s", name, ce.Op, ce.Path, ce.Why)
	}
	var te *tool.Error
	if errors.As(err, &te) {
		return te
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return tool.Errorf(tool.CodeToolFailed, "tool %q: %s %q: %v", name, pe.Op, pe.Path, pe.Err)
	}
	return tool.Errorf(tool.CodeInternal, "tool %q: %v", name, err)
}

// ctxError is the error of a call whose context ended: TOOL_TIMEOUT for a deadline (the
// caller tells WALL_TIMEOUT from TOOL_TIMEOUT, knowing which deadline it set), CANCELLED
// otherwise.
func ctxError(ctx context.Context, name string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return tool.Errorf(tool.CodeToolTimeout, "tool %q: the attempt's deadline passed", name)
	}
	return tool.Errorf(tool.CodeCancelled, "tool %q: cancelled", name)
}
