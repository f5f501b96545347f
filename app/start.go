package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/console"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/metrics"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/reconcile"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/worker"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// App is a running SW4RM process.
type App struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	temporal client.Client
	worker   sdkworker.Worker
	grpc     *grpc.Server
	grpcLis  net.Listener
	http     *http.Server
	httpLis  net.Listener
	// portHTTP serves Connect and gRPC-Web on the gRPC port (portMux).
	portHTTP *http.Server
	// inproc is the gRPC server's in-process listener, the console's way in (newConsole).
	inproc *bufconn.Listener
	// console is the operator console on the HTTP port; consoleConn its connection.
	console     *console.Console
	consoleConn *grpc.ClientConn
	httpTLS     bool
	stopOnce    sync.Once
	stopSweep   context.CancelFunc
	// sweepDone closes when the router's Run has returned (its last writes are made).
	sweepDone chan struct{}
	metrics   *metrics.Router
	// stopTracing flushes and stops the trace export (telemetry.Setup).
	stopTracing func(context.Context) error
	sink        *audit.Sink
	// access writes and counts every access decision of the router and the frontend (§6.5).
	access    *audit.AccessLog
	router    *router.Router
	relay     *outbox.Relay
	stopRelay context.CancelFunc
	// relayDone closes when the outbox relay's Run has returned.
	relayDone chan struct{}
	// stopReconcile ends the worker's reconciliation of the activity buffer (§10);
	// reconcileDone closes when it has returned.
	stopReconcile context.CancelFunc
	reconcileDone chan struct{}
	// auth authenticates the gRPC frontend's callers (nil without the server role).
	auth *frontend.Authenticator
	// reasoning answers EvaluateDebate and Summarize for the frontend and the activities.
	reasoning reasoning.Engine
	// stopMCP ends the import of the configured MCP servers; mcpDone closes when it has
	// returned.
	stopMCP context.CancelFunc
	mcpDone chan struct{}
	// toolExecutors run the tool providers this process serves, by provider id.
	toolExecutors map[string]tools.Executor
	// toolWorkers poll the providers' task queues (startToolWorkers); closeTools ends the
	// executors' sessions and processes after them.
	toolWorkers []sdkworker.Worker
	closeTools  func()
	// worktreeSweep ends the per-worktree MCP servers of unbound worktrees (nil without the
	// worker role or such a server).
	worktreeSweep *worktreeSessionSweep
}

// Start starts the requested roles: it checks everything that needs no connection (the
// settings, Config.Resolve; the TLS, ACL and HITL decision key files), then opens the store,
// connects to Temporal and starts the roles. A bad setting or file thus stops the process at
// once. One role alone needs PostgreSQL (CheckStore).
func Start(ctx context.Context, cfg Config, roles Roles, log *slog.Logger) (*App, error) {
	if err := CheckStore(cfg, roles); err != nil {
		return nil, err
	}
	p, err := prepare(cfg, roles, log)
	if err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return start(ctx, p, roles, log, st)
}

// StartWithStore is Start over an already open store, which the App then owns and closes.
func StartWithStore(ctx context.Context, cfg Config, roles Roles, log *slog.Logger, st store.Store) (*App, error) {
	p, err := prepare(cfg, roles, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	return start(ctx, p, roles, log, st)
}

// OpenStore opens the store the configuration names: PostgreSQL when DatabaseURL is set
// (applying migrations), else memory.
func OpenStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	if cfg.DatabaseURL == "" {
		return memory.New(), nil
	}
	return postgres.Open(ctx, cfg.DatabaseURL, log, postgres.WithGroupCommit(postgres.GroupCommitOptions{Window: cfg.GroupCommitWindow, Flushers: cfg.GroupCommitFlushers}))
}

// prepared is what a process starts with once everything that needs no connection is read
// and checked.
type prepared struct {
	Resolved
	// sec is what the server role's TLS and ACL files hold.
	sec security
	// decisionKey is the HITL decision key (LoadHITLDecisionKey); nil when the process has
	// nothing to sign or check.
	decisionKey ed25519.PrivateKey
}

// prepare resolves the settings and reads the files they name, before any store, port or
// connection is opened.
func prepare(cfg Config, roles Roles, log *slog.Logger) (prepared, error) {
	r, err := cfg.Resolve()
	if err != nil {
		return prepared{}, err
	}
	if err := CheckHITLKey(cfg, roles); err != nil {
		return prepared{}, err
	}
	sec, err := loadSecurity(cfg, roles, log)
	if err != nil {
		return prepared{}, err
	}
	key, err := LoadHITLDecisionKey(cfg, roles, log)
	if err != nil {
		return prepared{}, err
	}
	if key != nil {
		r.HITLPolicy.DecisionKeys = []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	}
	return prepared{Resolved: r, sec: sec, decisionKey: key}, nil
}

// LoadHITLDecisionKey returns the HITL decision key: read from cfg.HITLDecisionKeyFile when
// it is set; generated in memory for `sw4rm dev`, whose one process both signs and checks
// (a restart makes a new one, and waiting invocations reload the policy that names it);
// nil for a role alone without operators, which has nothing to sign or check.
func LoadHITLDecisionKey(cfg Config, roles Roles, log *slog.Logger) (ed25519.PrivateKey, error) {
	if cfg.HITLDecisionKeyFile != "" {
		key, err := auth.LoadPrivateKey(cfg.HITLDecisionKeyFile)
		if err != nil {
			return nil, settingError("SW4RM_HITL_DECISION_KEY_FILE", err)
		}
		return key, nil
	}
	if err := CheckHITLKey(cfg, roles); err != nil {
		return nil, err
	}
	if roles.Server != roles.Worker {
		return nil, nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate a HITL decision key: %w", err)
	}
	log.Info("HITL decision key generated in memory: this process signs and checks its operators' decisions with it; "+
		"set SW4RM_HITL_DECISION_KEY_FILE to share one with separate servers and workers",
		"key_id", auth.KeyID(auth.AlgorithmEd25519, key.Public().(ed25519.PublicKey)))
	return key, nil
}

// start starts the roles over an open store: what every process runs, then the worker, then
// the server. On an error everything started so far is stopped, the store closed.
func start(ctx context.Context, p prepared, roles Roles, log *slog.Logger, st store.Store) (_ *App, err error) {
	a := &App{cfg: p.Config, log: log, store: st}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	// Before anything that makes spans or dials: the global tracer provider and propagator
	// are read when clients and servers are built.
	if a.stopTracing, err = telemetry.Setup(ctx, p.Tracing, strings.ReplaceAll(roles.command(), " ", "-")); err != nil {
		return nil, settingError("SW4RM_TRACING", err)
	}
	if err := a.startShared(ctx, p, roles); err != nil {
		return nil, err
	}
	if roles.Worker {
		if err := a.startWorker(ctx, p); err != nil {
			return nil, err
		}
	}
	if roles.Server {
		if err := a.startServer(ctx, p); err != nil {
			return nil, err
		}
	} else if err := a.serveWorkerHTTP(p.Config, p.sec.tls); err != nil {
		return nil, err
	}
	return a, nil
}

// startShared starts what every process runs, whatever its roles: the Temporal client (with
// SW4RM's search attributes), the tool executors, the reasoning engine, the audit sink, the
// router and its metrics, and the outbox relay.
func (a *App) startShared(ctx context.Context, p prepared, roles Roles) error {
	cfg, log, st := p.Config, a.log, a.store
	var err error
	// The SDK's per-workflow and per-activity lines and the audit sink's are the event
	// stream, which a quiet terminal leaves to the audit log file (EventLogger).
	events := EventLogger(log)
	// With tracing on, every start, signal, activity and child workflow carries its span in
	// its Temporal header; the workers built from this client inherit the interceptors.
	icpts, err := telemetry.TemporalInterceptors(workflows.TracedSignals...)
	if err != nil {
		return err
	}
	// Before the client: its metrics handler serves the SDK's metrics on /metrics.
	a.metrics = metrics.New(st)
	a.temporal, err = client.DialContext(ctx, client.Options{
		HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace, Logger: worker.NewLogger(events), Interceptors: icpts,
		MetricsHandler: a.metrics.TemporalHandler(log),
	})
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	if err := worker.EnsureSearchAttributes(ctx, a.temporal, cfg.Namespace); err != nil {
		return fmt.Errorf("register search attributes in namespace %s: %w", cfg.Namespace, err)
	}
	a.toolExecutors, a.closeTools = toolExecutors(cfg, p.MCPProviders, log)
	if a.reasoning, err = reasoning.FromConfig(cfg.ReasoningExternal); err != nil {
		return settingError("SW4RM_REASONING_EXTERNAL", err)
	}
	log.Info("reasoning engine", "engine", reasoning.NameOf(a.reasoning))
	if len(p.HITLPolicy.Operators) == 0 && cfg.HITLExternal == "" && cfg.HITLAgent == "" {
		log.Warn("no HITL operators, no HITL agent and no external HITL component: every HITL invocation gets its fallback at once (§15.3); set SW4RM_HITL_OPERATORS")
	}
	a.sink = audit.NewAsync(events, st.Audit(), 4096)
	// The process's one HLC (§4): the router stamps envelopes with it, the sink audit rows.
	clock, err := newClock(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	a.sink.SetClock(clock)
	if cfg.PhysicalClock != nil {
		a.sink.SetWallClock(cfg.PhysicalClock)
	}
	// Every transition the sink records is counted where it happened (metrics, patterns.go).
	a.sink.SetObserver(a.metrics.ObserveAudit)
	a.access = audit.NewAccessLog(a.sink, cfg.AuditAccess)
	rc := routerConfig(cfg, p.sec.acl)
	rc.Access = a.access
	a.router = router.New(st, rc, a.sink)
	a.metrics.SetBufferCapacity(a.router.Config().BufferCapacity)
	a.metrics.CountOpenDAGRuns(openDAGRuns(a.temporal, cfg.Namespace))
	a.metrics.ObserveAccess(a.access)
	a.router.SetMetrics(a.metrics)
	a.startRelay()
	// ACKs of the scheduler's CONTROL messages, and the sections agents declare, go to the
	// agents' lifecycle workflows (§7).
	sched := bridge.NewScheduler(a.temporal, a.relay, st, a.sink)
	// The HITL agent's decisions, vouched for with the decision key (§15, docs/hitl.md).
	sched.SetHITLAgent(p.HITLPolicy.Agent, p.decisionKey)
	a.router.SetScheduler(sched.Handlers(), sched)
	log.Info("sw4rm starting", "temporal", cfg.TemporalAddress, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue,
		"store", st.Kind(), "server", roles.Server, "worker", roles.Worker)
	return nil
}

// startRelay starts the outbox relay. Every process relays the outbox entries that store
// writes promised, so what one process wrote reaches Temporal even if that process dies.
func (a *App) startRelay() {
	a.relay = outbox.New(a.store.Outbox(), outbox.Config{}, a.log, a.sink)
	bridge.RegisterOutboxHandlers(a.relay, a.temporal, a.store, a.sink, a.cfg.TaskQueue)
	relayCtx, stopRelay := context.WithCancel(context.Background())
	a.stopRelay, a.relayDone = stopRelay, make(chan struct{})
	go func() {
		defer close(a.relayDone)
		a.relay.Run(relayCtx)
	}()
}

// startWorker starts the worker role: the Temporal worker that hosts every workflow and the
// activities on the task queue, and one worker per tool provider.
func (a *App) startWorker(ctx context.Context, p prepared) error {
	repoManager, err := openRepos(ctx, p.RepoPaths, p.WorktreeRoot)
	if err != nil {
		return err
	}
	a.log.Info("repositories", "repos", repoManager.RepoIDs(), "worktree_root", p.WorktreeRoot)
	// A stopping worker (SIGTERM in a rolling deploy) finishes the activities it runs, so a
	// replaced worker hands nothing to a start-to-close timeout.
	a.worker = sdkworker.New(a.temporal, p.TaskQueue, sdkworker.Options{WorkerStopTimeout: p.WorkerStopTimeout})
	acts := newActivities(p.Resolved, a.store, a.router, a.sink, a.temporal, a.reasoning, repoManager)
	// The per-worktree MCP servers this process starts end with their worktree's binding;
	// each one ended is an event of the stream (EventLogger), not a line for the terminal.
	a.worktreeSweep = newWorktreeSessionSweep(a.toolExecutors, a.store.Worktrees(), EventLogger(a.log))
	if a.worktreeSweep != nil {
		acts.WorktreeUnbound = a.worktreeSweep.Nudge
		a.worktreeSweep.start(MCPWorktreeSweepInterval)
	}
	worker.Register(a.worker, acts)
	if err := a.worker.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	a.log.Info("worker polling", "task_queue", p.TaskQueue)
	a.startReconciler(p.Config)
	return a.startToolWorkers()
}

// startReconciler starts the worker's reconciliation of the activity buffer (§10): every
// worker sweeps, and the store closes each orphaned entry for exactly one of them.
func (a *App) startReconciler(cfg Config) {
	r := reconcile.New(a.store, reconcile.TemporalOracle(a.temporal), a.sink,
		reconcile.Config{Interval: cfg.ActivityReconcileInterval, Grace: cfg.ActivityReconcileGrace}, a.log)
	ctx, stop := context.WithCancel(context.Background())
	a.stopReconcile, a.reconcileDone = stop, make(chan struct{})
	go func() {
		defer close(a.reconcileDone)
		r.Run(ctx)
	}()
}

// OpenRepos checks the repositories of SW4RM_REPOS and returns their manager: each must be a
// git repository (and git installed), and the worktree root, if set, absolute.
func OpenRepos(ctx context.Context, cfg Config) (*repos.Manager, error) {
	paths, err := repos.Parse(cfg.Repos)
	if err != nil {
		return nil, settingError("SW4RM_REPOS", err)
	}
	return openRepos(ctx, paths, cfg.WorktreeRoot)
}

// openRepos is OpenRepos over parsed repositories.
func openRepos(ctx context.Context, paths map[string]string, root string) (*repos.Manager, error) {
	m, err := repos.New(ctx, paths, root)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", settingNamed("SW4RM_REPOS"), settingNamed("SW4RM_WORKTREE_ROOT"), err)
	}
	return m, nil
}

// startServer starts the server role: the authenticator, the router's timers, the gRPC
// frontend and the HTTP port, then the import of the configured MCP servers.
func (a *App) startServer(ctx context.Context, p prepared) error {
	cfg, log, st := p.Config, a.log, a.store
	ac := authConfig(p.Resolved, st.Keys(), a.sink, log)
	ac.Access = a.access
	a.auth = frontend.NewAuthenticator(ac)
	if cfg.Auth == auth.Off {
		log.Warn("authentication is off (SW4RM_AUTH=off): any client that reaches the port can act as any agent; fine on a laptop, never on a shared network (docs/security.md)")
	} else {
		log.Info("authentication", "mode", cfg.Auth.String(), "clock_skew", cfg.AuthClockSkew.String(), "key_overlap", cfg.KeyOverlap.String())
	}
	// The router's timers (ACK timeouts, TTLs, response deadlines, retention) run in every
	// frontend; the store hands each expired item to exactly one of them.
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	a.stopSweep, a.sweepDone = stopSweep, make(chan struct{})
	go func() {
		defer close(a.sweepDone)
		a.router.Run(sweepCtx)
	}()
	fe := frontend.New(st, a.router, a.temporal, a.relay, a.sink, log, frontendConfig(p.Resolved, p.decisionKey, p.sec.acl, a.auth, a.reasoning))
	if err := RegisterBuiltinTools(ctx, a.toolExecutors, st.ToolProviders()); err != nil {
		return err
	}
	if err := a.newConsole(p, p.sec.tls != nil); err != nil {
		return err
	}
	if err := a.serve(cfg, p.sec.tls, func(g *grpc.Server) { fe.Register(g) }, a.httpHandler()); err != nil {
		return err
	}
	// In the background: a slow or absent MCP server must not hold the frontend back.
	mcpCtx, stopMCP := context.WithCancel(context.Background())
	a.stopMCP, a.mcpDone = stopMCP, make(chan struct{})
	go func() {
		defer close(a.mcpDone)
		ImportMCPProviders(mcpCtx, p.MCPProviders, st.ToolProviders(), a.sink, log)
	}()
	return nil
}

// httpHandler serves the HTTP port: /metrics, /healthz and the gRPC port's descriptor set.
func (a *App) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.Handler())
	mux.Handle("GET "+DescriptorsPath, descriptorsHandler(&a.grpc))
	if a.console != nil {
		mux.Handle(console.Prefix, a.console.Handler())
	}
	mux.HandleFunc("GET /healthz", a.healthz)
	return mux
}

// GRPCAddr is the address the frontend actually listens on (useful with port 0).
func (a *App) GRPCAddr() string {
	if a.grpcLis == nil {
		return ""
	}
	return a.grpcLis.Addr().String()
}

// HTTPAddr is the address /healthz is served on.
func (a *App) HTTPAddr() string {
	if a.httpLis == nil {
		return ""
	}
	return a.httpLis.Addr().String()
}

// Temporal returns the process's Temporal client.
func (a *App) Temporal() client.Client { return a.temporal }

// Router returns the process's router.
func (a *App) Router() *router.Router { return a.router }

// Store returns the process's store.
func (a *App) Store() store.Store { return a.store }
