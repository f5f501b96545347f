package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// SessionIdleTimeout is how long a session with no call in flight is kept for the next
// call. A per-worktree server runs once per worktree that called it, so sessions that
// nobody uses any more — a worktree that was unbound — are ended instead of kept forever.
const SessionIdleTimeout = 10 * time.Minute

// ProgressContentType is the content type of the frames a call's progress notifications
// become: the JSON of a Progress.
const ProgressContentType = "application/json"

// Executor runs the tools of one configured MCP provider (tools.Executor). It keeps one
// session per worktree for a server whose command line holds WorktreePlaceholder, else one
// for all calls, starts it at the first call that needs it, and starts a new one when it
// died (the server exited or went away). Sessions idle for SessionIdleTimeout are ended,
// EndUnbound ends those of worktrees no longer bound, and Close ends them all. An Executor is safe for concurrent use.
type Executor struct {
	p Provider
	// connect starts or reaches a server; Connect, or an in-memory server in tests.
	connect func(ctx context.Context, s Server) (*Client, error)
	// idle is SessionIdleTimeout, shorter in tests.
	idle time.Duration
	// now reads the clock, for the idle sweep.
	now func() time.Time
	// cpuPoll is CPUPollInterval, shorter in tests.
	cpuPoll time.Duration

	mu       sync.Mutex
	closed   bool
	sessions map[string]*session // by worktree; "" when the server is not per worktree
}

// session is one cached session and its bookkeeping.
type session struct {
	// mu is held while the session is (re)connected, so concurrent first calls start one
	// server, not several.
	mu     sync.Mutex
	client *Client
	// use is shared by calls without budget_cpu_ms and taken whole by one with it (cpu.go).
	use *semaphore.Weighted
	// stop ends the context the session was connected under.
	stop context.CancelFunc

	// inFlight and lastUsed are guarded by Executor.mu: a session with calls in flight is
	// never swept.
	inFlight int
	lastUsed time.Time
}

// NewExecutor returns the Executor of provider p. It starts nothing until the first call.
func NewExecutor(p Provider) *Executor {
	return &Executor{p: p, connect: Connect, idle: SessionIdleTimeout, now: time.Now, cpuPoll: CPUPollInterval, sessions: map[string]*session{}}
}

var _ tools.Executor = (*Executor)(nil)

// Provider returns the provider whose tools the executor runs.
func (e *Executor) Provider() Provider { return e.p }

// Call runs one attempt of req on the provider's server:
//   - a call whose network_policy is stricter than the provider's declared posture is
//     refused with PERMISSION_DENIED before any server is reached (§18.5.2): SW4RM cannot
//     confine a server per call, so it only calls one whose posture the policy allows;
//   - a per-worktree provider needs req.Worktree: without one, PERMISSION_DENIED (§16);
//   - the call asks for progress, and each progress notification becomes a frame through
//     emit (ProgressContentType, the JSON of a Progress), in order, before the result;
//   - the result is the tool's structured content when it gave one, else its content
//     blocks (Result.Data); a tool error is TOOL_FAILED or PERMISSION_DENIED (CallTool);
//   - when ctx ends the SDK tells the server (notifications/cancelled, §18.6) and Call
//     returns CANCELLED, or TOOL_TIMEOUT for a deadline, without waiting for the server;
//   - when emit fails the call takes no more frames: the tool is cancelled the same way and
//     Call returns CANCELLED;
//   - budget_cpu_ms is enforced on a stdio server, the call holding the session alone while
//     its server's CPU time is measured (callBudgeted), and refused with PERMISSION_DENIED
//     for an HTTP server, whose CPU time SW4RM cannot see.
func (e *Executor) Call(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	if req.ProviderID != "" && req.ProviderID != e.p.ID {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "the executor of provider %q was handed a call for provider %q", e.p.ID, req.ProviderID)
	}
	if err := e.checkNetwork(req.Policy.Network); err != nil {
		return tools.Result{}, err
	}
	srv, err := e.p.ServerFor(req.Worktree)
	if err != nil {
		return tools.Result{}, err
	}
	if err := e.checkCPUBudget(req, srv); err != nil {
		return tools.Result{}, err
	}
	key := ""
	if e.p.PerWorktree() {
		key = filepath.Clean(req.Worktree)
	}
	budgeted := req.Policy.BudgetCPU > 0
	s, c, release, err := e.session(ctx, key, srv, budgeted)
	if err != nil {
		return tools.Result{}, err
	}
	defer release()
	if budgeted {
		return e.callBudgeted(ctx, s, c, req, emit)
	}
	return call(ctx, c, req, emit)
}

// checkNetwork refuses a call whose network policy is stricter than the provider's posture.
func (e *Executor) checkNetwork(n tool.NetworkPolicy) error {
	if n == "" {
		n = tool.NetworkDenyAll // §18.5.2: "SHOULD default to DENY_ALL"
	}
	order := tool.NetworkPolicies() // most restrictive first
	asked, posture := slices.Index(order, n), slices.Index(order, e.p.Posture())
	if asked < 0 {
		return tool.Errorf(tool.CodeValidation, "network_policy %q is not one of DENY_ALL, EGRESS_RESTRICTED, EGRESS_UNRESTRICTED, FULL_ACCESS", n)
	}
	if posture < 0 { // a Provider built by hand, not by ParseProviders
		return tool.Errorf(tool.CodeInternal, "MCP provider %q declares the unknown network posture %q", e.p.ID, e.p.Network)
	}
	if asked >= posture {
		return nil
	}
	if e.p.Network == "" {
		return tool.Errorf(tool.CodePermissionDenied, "network_policy %s cannot be honoured by MCP provider %q: SW4RM cannot confine an MCP server per call, and the deployment declares no network posture for this server, so it may use the network as it likes (FULL_ACCESS); call it with network_policy FULL_ACCESS, or have the operator declare its posture (docs/tools.md, \"MCP providers\")", n, e.p.ID)
	}
	return tool.Errorf(tool.CodePermissionDenied, "network_policy %s cannot be honoured by MCP provider %q: SW4RM cannot confine an MCP server per call, and the deployment declares that this server may use the network up to %s", n, e.p.ID, e.p.Network)
}

// session returns the live session for key, connecting one when there is none or it died,
// and a release func to call when the call is done with it. An exclusive call has the
// session to itself: it waits, within ctx, for the calls in flight on it to end, and the
// calls that come after it wait for it.
func (e *Executor) session(ctx context.Context, key string, srv Server, exclusive bool) (*session, *Client, func(), error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, nil, nil, tool.Errorf(tool.CodeInternal, "the executor of MCP provider %q is closed", e.p.ID)
	}
	idle := e.sweepLocked()
	s := e.sessions[key]
	if s == nil {
		s = &session{use: newUse()}
		e.sessions[key] = s
	}
	s.inFlight++ // reserved before connecting, so the sweep leaves it alone
	e.mu.Unlock()
	if len(idle) > 0 {
		// In the background: this call need not wait for idle servers to exit.
		go closeAll(idle)
	}

	weight := int64(1)
	if exclusive {
		weight = exclusiveWeight
	}
	unreserve := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		s.inFlight--
		s.lastUsed = e.now()
	}
	if err := s.use.Acquire(ctx, weight); err != nil {
		unreserve()
		return nil, nil, nil, classify(ctx, "waiting for MCP provider "+e.p.ID+"'s server to run a call alone (budget_cpu_ms)", err)
	}
	release := func() {
		s.use.Release(weight)
		unreserve()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil && !s.client.alive() {
		s.end()
	}
	if s.client == nil {
		c, stop, err := e.dial(ctx, srv)
		if err != nil {
			release()
			return nil, nil, nil, err
		}
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed { // Close ran while this one was connecting: do not leave it running.
			_ = c.Close()
			stop()
			release()
			return nil, nil, nil, tool.Errorf(tool.CodeInternal, "the executor of MCP provider %q is closed", e.p.ID)
		}
		s.client, s.stop = c, stop
	}
	return s, s.client, release, nil
}

// dial connects to srv. The session must outlive the call that starts it, so it is
// connected under a context of its own (the SDK reads the session under the context it was
// connected with); the call's ctx still bounds the handshake: when ctx ends first, the
// half-made session is ended.
func (e *Executor) dial(ctx context.Context, srv Server) (*Client, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, cancel)
	c, err := e.connect(sctx, srv)
	if !stopWatch() { // ctx ended during the handshake, and sctx with it
		if c != nil {
			_ = c.Close()
		}
		cancel()
		return nil, nil, classify(ctx, "connecting to MCP provider "+e.p.ID, ctx.Err())
	}
	if err != nil {
		cancel()
		if _, ok := err.(*tool.Error); ok {
			return nil, nil, err
		}
		return nil, nil, classify(ctx, "connecting to MCP provider "+e.p.ID, err)
	}
	return c, cancel, nil
}

// sweepLocked removes the sessions idle for longer than e.idle and returns them, to be
// closed once e.mu is released (closing a stdio session waits for its process to exit).
func (e *Executor) sweepLocked() []*session {
	var idle []*session
	now := e.now()
	for k, s := range e.sessions {
		if s.inFlight == 0 && !s.lastUsed.IsZero() && now.Sub(s.lastUsed) > e.idle {
			delete(e.sessions, k)
			idle = append(idle, s)
		}
	}
	return idle
}

// EndUnbound ends the sessions of per-worktree servers whose worktree is no longer bound —
// bound(ctx) returns the directories of the worktrees bound now — and returns the
// worktrees whose sessions it ended. A worktree's server is a resource of its binding: once
// the binding ends (the agent unbound, or deregistered and its binding released), its
// process is stopped rather than kept until the idle timeout or the server's shutdown.
// Only sessions idle since before bound was called are ended, so a session that a call
// starts or uses meanwhile — for a worktree bound after bound read — is kept.
func (e *Executor) EndUnbound(ctx context.Context, bound func(context.Context) ([]string, error)) ([]string, error) {
	if !e.p.PerWorktree() {
		return nil, nil
	}
	type seen struct {
		s        *session
		lastUsed time.Time
	}
	e.mu.Lock()
	idle := map[string]seen{}
	for k, s := range e.sessions {
		if s.inFlight == 0 && !s.lastUsed.IsZero() {
			idle[k] = seen{s, s.lastUsed}
		}
	}
	e.mu.Unlock()
	if len(idle) == 0 {
		return nil, nil
	}
	paths, err := bound(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		delete(idle, filepath.Clean(p))
	}
	var ended []string
	var end []*session
	e.mu.Lock()
	for k, was := range idle {
		// Still the same session, and not used since the snapshot.
		if s := e.sessions[k]; s == was.s && s.inFlight == 0 && s.lastUsed.Equal(was.lastUsed) {
			delete(e.sessions, k)
			end = append(end, s)
			ended = append(ended, k)
		}
	}
	e.mu.Unlock()
	closeAll(end)
	slices.Sort(ended)
	return ended, nil
}

// Close ends every cached session (a stdio server's process is stopped) and refuses later
// calls. Calls in flight end with the session's end.
func (e *Executor) Close() error {
	e.mu.Lock()
	e.closed = true
	all := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.sessions = map[string]*session{}
	e.mu.Unlock()
	closeAll(all)
	return nil
}

// closeAll ends sessions, all at once: each may wait for its server's process to exit.
func closeAll(ss []*session) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.end()
		})
	}
	wg.Wait()
}

// end closes the session's client; s.mu is held.
func (s *session) end() {
	if s.client != nil {
		_ = s.client.Close()
		s.stop()
		s.client, s.stop = nil, nil
	}
}

// call runs one tool call on c, turning its progress notifications into frames.
func call(ctx context.Context, c *Client, req tools.Request, emit tools.Emit) (tools.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The notifications arrive on the session's reading goroutine, which must not wait for
	// emit's I/O: they are queued, and this goroutine emits them.
	q := &progressQueue{ready: make(chan struct{}, 1)}
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := c.CallToolProgress(ctx, req.ToolName, json.RawMessage(req.Args), q.push)
		done <- outcome{r, err}
	}()
	var emitErr error
	send := func() {
		for _, p := range q.take() {
			if emitErr != nil {
				return
			}
			data, err := json.Marshal(p)
			if err == nil {
				err = emit(ctx, ProgressContentType, data)
			}
			if err != nil {
				emitErr = err
				cancel() // the caller takes no more frames: stop the tool
			}
		}
	}
	for {
		select {
		case <-q.ready:
			send()
		case o := <-done:
			if ctx.Err() == nil {
				send() // progress queued before the result or error is still delivered, in order
			}
			if emitErr != nil {
				return tools.Result{}, tool.Errorf(tool.CodeCancelled, "tool %q stopped: its call takes no more frames: %v", req.ToolName, emitErr)
			}
			if o.err != nil {
				var te *tool.Error
				if errors.As(o.err, &te) && te.Code == tool.CodeInternal && !c.alive() {
					return tools.Result{}, tool.Errorf(tool.CodeInternal, "%s (the MCP server's session ended during the call; the next call starts a new one)", te.Msg)
				}
				return tools.Result{}, o.err
			}
			return tools.Result{ContentType: o.r.ContentType(), Data: o.r.Data()}, nil
		}
	}
}

// progressQueue holds a call's progress notifications until its goroutine emits them.
type progressQueue struct {
	mu    sync.Mutex
	items []Progress
	ready chan struct{} // capacity 1: "there is something to take"
}

func (q *progressQueue) push(p Progress) {
	q.mu.Lock()
	q.items = append(q.items, p)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *progressQueue) take() []Progress {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}
