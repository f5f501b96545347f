// Package app wires SW4RM's processes together: it opens the store, connects to Temporal,
// and runs the gRPC frontend, the Temporal worker, or both (`sw4rm server`, `sw4rm worker`,
// `sw4rm dev`). The end-to-end tests start the system through it exactly as the binary does.
package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/metrics"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
	"github.com/sw4rm/sw4rm-temporal/worker"
)

// Config is the process configuration; every field has a flag and an SW4RM_* variable.
type Config struct {
	// TemporalAddress is host:port of the Temporal frontend (SW4RM_TEMPORAL_ADDRESS).
	TemporalAddress string
	// Namespace is the Temporal namespace (SW4RM_NAMESPACE).
	Namespace string
	// TaskQueue is the Temporal task queue (SW4RM_TASK_QUEUE).
	TaskQueue string
	// GRPCAddr is where the gRPC frontend listens (SW4RM_GRPC_ADDR).
	GRPCAddr string
	// HTTPAddr serves /healthz, empty to disable (SW4RM_HTTP_ADDR).
	HTTPAddr string
	// DatabaseURL selects PostgreSQL; empty means the in-memory store (SW4RM_DATABASE_URL).
	DatabaseURL string
	// BufferCapacity is the per-agent inbound buffer (SW4RM_BUFFER_CAPACITY, §13).
	BufferCapacity int
	// MaxPayloadBytes is the payload limit (SW4RM_MAX_PAYLOAD_BYTES, §5.4).
	MaxPayloadBytes int
	// AgentInitTimeout bounds INITIALIZING (SW4RM_AGENT_INIT_TIMEOUT, §8.3).
	AgentInitTimeout time.Duration
	// HeartbeatInterval is how often each agent is heartbeated (SW4RM_HEARTBEAT_INTERVAL, §14).
	HeartbeatInterval time.Duration
	// HeartbeatMisses is the debounce before an agent is marked unavailable
	// (SW4RM_HEARTBEAT_MISSES, §14).
	HeartbeatMisses int
	// DeliveryLease is how long an unconfirmed delivery waits before redelivery on the same
	// stream (SW4RM_DELIVERY_LEASE).
	DeliveryLease time.Duration
	// AckTimeout is the SENT → TIMED_OUT timeout (SW4RM_ACK_TIMEOUT, §11, default 10 s).
	AckTimeout time.Duration
	// MaxRetries is the retry budget before the DLQ (SW4RM_MAX_RETRIES, §21.1).
	MaxRetries int
	// DedupWindow is the idempotency window (SW4RM_DEDUP_WINDOW, §11.2, default 3600 s).
	DedupWindow time.Duration
	// StreamRetention keeps confirmed rows for offset resumption (SW4RM_STREAM_RETENTION, §5.5).
	StreamRetention time.Duration
	// DLQRetention bounds the dead-letter queue (SW4RM_DLQ_RETENTION, §21.1).
	DLQRetention time.Duration
	// PrivilegedRate and PrivilegedBurst limit each producer's PRIVILEGED lane
	// (SW4RM_PRIVILEGED_RATE messages/s, SW4RM_PRIVILEGED_BURST, §7.3).
	PrivilegedRate  float64
	PrivilegedBurst int
	// LaneWeights are the PRIVILEGED,STANDARD,BULK delivery shares (SW4RM_LANE_WEIGHTS, "6,3,1").
	LaneWeights store.LaneWeights
	// RoomTimeout bounds a negotiation room's wait for votes (SW4RM_ROOM_TIMEOUT, §17.5).
	RoomTimeout time.Duration
	// RoomStrategy is the room's vote aggregation (SW4RM_ROOM_STRATEGY: confidence_weighted,
	// simple_average, majority_vote or borda_count).
	RoomStrategy string
	// HITLOperators is the operator policy, "name=token[:REASON|REASON],..."
	// (SW4RM_HITL_OPERATORS, §15.1). Empty means no human can decide: every invocation gets
	// its fallback at once (§15.3).
	HITLOperators string
	// HITLTimeout is the deadline of invocations raised through HitlService.Decide
	// (SW4RM_HITL_TIMEOUT).
	HITLTimeout time.Duration
	// HITLExternal is the address of an external HITL component serving the canonical
	// HitlService, empty for none (SW4RM_HITL_EXTERNAL, §15.4).
	HITLExternal string
	// HITLOperatorKeys are operators' own Ed25519 public keys, "name=<base64 key>,..."
	// (SW4RM_HITL_OPERATOR_KEYS): a decision an operator signs with the matching private key
	// (`sw4rm hitl sign`) is accepted from a plain `temporal workflow signal`.
	HITLOperatorKeys string
	// HITLDecisionKeyFile is the deployment's HITL decision key, a file holding an Ed25519
	// seed (SW4RM_HITL_DECISION_KEY_FILE, auth.LoadPrivateKey): servers attest the decisions
	// of operators they authenticated with it, workers verify them with its public key, so
	// every server and worker reads the same file. `sw4rm dev` generates one in memory when
	// it is unset.
	HITLDecisionKeyFile string
	// MaxParallel is max_parallel_instances per agent type, "type=n,...,*=n"
	// (SW4RM_MAX_PARALLEL, §9.1); empty means no limit.
	MaxParallel string
	// ConflictThreshold is the confidence below which a scope conflict goes to HITL
	// (SW4RM_CONFLICT_THRESHOLD, §9.3); zero means 0.7.
	ConflictThreshold float64
	// InferenceUnavailable is what to do when the inference engine fails: serialize, hitl or
	// allow (SW4RM_INFERENCE_UNAVAILABLE, §9.3).
	InferenceUnavailable string
	// PreemptTimeout bounds an unanswered PREEMPT_REQUEST outside a non-preemptible section
	// (SW4RM_PREEMPT_TIMEOUT, §7.2).
	PreemptTimeout time.Duration
	// TerminateGrace is TERMINATE's grace period before KILL (SW4RM_TERMINATE_GRACE, §7.2).
	TerminateGrace time.Duration
	// Auth is how strictly callers are authenticated (SW4RM_AUTH: off, optional or required;
	// §6.2, §6.5, docs/security.md).
	Auth auth.Mode
	// AuthClockSkew is how far a signed call's timestamp may be from the server's clock
	// (SW4RM_AUTH_CLOCK_SKEW, default 30 s).
	AuthClockSkew time.Duration
	// KeyOverlap is how long a rotated-out agent key stays valid beside its successor
	// (SW4RM_KEY_OVERLAP, default 5 m, §23).
	KeyOverlap time.Duration
	// TLSCertFile and TLSKeyFile are the PEM certificate and key of the gRPC and HTTP ports
	// (SW4RM_TLS_CERT_FILE, SW4RM_TLS_KEY_FILE): both set turn TLS on, and the certificate is
	// read again when its files change; neither means plaintext (see ServerTLS).
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile turns on mutual TLS: every client of either port must present a
	// certificate this PEM CA bundle verifies (SW4RM_TLS_CLIENT_CA_FILE).
	TLSClientCAFile string
	// ACLFile is the access-control list of §6.3 (SW4RM_ACL_FILE, docs/acl.md); empty means
	// no ACL.
	ACLFile string
	// ReasoningExternal is the address of an external reasoning engine serving the canonical
	// ReasoningProxy, which answers EvaluateDebate and Summarize for the frontend and the
	// workers' activities; empty means the builtin engine (SW4RM_REASONING_EXTERNAL,
	// docs/reasoning.md).
	ReasoningExternal string
	// Repos are the git repositories agents bind worktrees in (§16), comma-separated
	// repo_id=/absolute/path pairs (SW4RM_REPOS, repos.Parse); each must be a git
	// repository, checked when a worker starts. Empty means none: every bind fails with
	// worktree_not_found.
	Repos string
	// WorktreeRoot is where worktrees are made, as <root>/<repo_id>/<worktree_id>
	// (SW4RM_WORKTREE_ROOT); empty means inside each repository, in
	// <repo>/.sw4rm-worktrees/<worktree_id> (docs/worktrees.md).
	WorktreeRoot string
	// MCPServers are the MCP servers imported as tool providers when a server starts
	// (SW4RM_MCP_SERVERS, mcp.ParseProviders): "id=stdio:command args...;id2=http://url".
	// Empty means none (docs/tools.md).
	MCPServers string
	// ToolPreApproved lists the tools whose PRIVILEGED and FULL_ACCESS calls run without a
	// HITL wait (SW4RM_TOOL_PREAPPROVED): "provider/tool" patterns separated by commas, *
	// allowed, e.g. "builtin/process.run,ci/*" (§18.5.3, docs/tools.md).
	ToolPreApproved string
	// ToolExecutors adds providers to the ones this process runs (the built-in provider and
	// the configured MCP servers), by provider id: for embedding and tests.
	ToolExecutors map[string]tools.Executor
}

// DevHITLOperators is the HITL operator policy of `sw4rm dev` when none is configured: one
// operator, dev, with the token sw4rm-dev-token, so that HITL waits on a laptop can be decided
// rather than all falling back at once (§15.3). Never meant for a shared deployment.
const DevHITLOperators = "dev=sw4rm-dev-token"

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		TemporalAddress:   "127.0.0.1:7233",
		Namespace:         "default",
		TaskQueue:         "sw4rm",
		GRPCAddr:          ":50051",
		HTTPAddr:          ":8080",
		BufferCapacity:    router.DefaultBufferCapacity,
		MaxPayloadBytes:   1 << 20,
		AgentInitTimeout:  60 * time.Second,
		HeartbeatInterval: 30 * time.Second,
		HeartbeatMisses:   3,
		DeliveryLease:     router.DefaultLease,
		HITLTimeout:       time.Hour,
		RoomTimeout:       10 * time.Minute,
		RoomStrategy:      "confidence_weighted",
		AckTimeout:        router.DefaultAckTimeout,
		MaxRetries:        router.DefaultMaxRetries,
		DedupWindow:       router.DefaultDedupWindow,
		StreamRetention:   router.DefaultStreamRetention,
		DLQRetention:      router.DefaultDLQRetention,
		PrivilegedRate:    router.DefaultPrivilegedRate,
		PrivilegedBurst:   router.DefaultPrivilegedBurst,
		LaneWeights:       router.DefaultLaneWeights,
		ConflictThreshold: 0.7,
		PreemptTimeout:    10 * time.Minute,
		TerminateGrace:    3 * time.Second,
		AuthClockSkew:     frontend.DefaultClockSkew,
		KeyOverlap:        frontend.DefaultKeyOverlap,
	}
}

// FromEnv overlays SW4RM_* environment variables on c; a malformed number or duration is an
// error naming the variable.
func (c Config) FromEnv() (Config, error) {
	str := func(name string, dst *string) {
		if v, ok := os.LookupEnv(name); ok {
			*dst = v
		}
	}
	str("SW4RM_TEMPORAL_ADDRESS", &c.TemporalAddress)
	str("SW4RM_NAMESPACE", &c.Namespace)
	str("SW4RM_TASK_QUEUE", &c.TaskQueue)
	str("SW4RM_GRPC_ADDR", &c.GRPCAddr)
	str("SW4RM_HTTP_ADDR", &c.HTTPAddr)
	str("SW4RM_DATABASE_URL", &c.DatabaseURL)
	str("SW4RM_HITL_OPERATORS", &c.HITLOperators)
	str("SW4RM_HITL_EXTERNAL", &c.HITLExternal)
	str("SW4RM_HITL_OPERATOR_KEYS", &c.HITLOperatorKeys)
	str("SW4RM_HITL_DECISION_KEY_FILE", &c.HITLDecisionKeyFile)
	str("SW4RM_ROOM_STRATEGY", &c.RoomStrategy)
	str("SW4RM_MAX_PARALLEL", &c.MaxParallel)
	str("SW4RM_INFERENCE_UNAVAILABLE", &c.InferenceUnavailable)
	str("SW4RM_TLS_CERT_FILE", &c.TLSCertFile)
	str("SW4RM_TLS_KEY_FILE", &c.TLSKeyFile)
	str("SW4RM_TLS_CLIENT_CA_FILE", &c.TLSClientCAFile)
	str("SW4RM_ACL_FILE", &c.ACLFile)
	str("SW4RM_REASONING_EXTERNAL", &c.ReasoningExternal)
	str("SW4RM_REPOS", &c.Repos)
	str("SW4RM_WORKTREE_ROOT", &c.WorktreeRoot)
	str("SW4RM_MCP_SERVERS", &c.MCPServers)
	str("SW4RM_TOOL_PREAPPROVED", &c.ToolPreApproved)
	if v, ok := os.LookupEnv("SW4RM_CONFLICT_THRESHOLD"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			return c, fmt.Errorf("SW4RM_CONFLICT_THRESHOLD=%q: want a confidence in (0, 1] like 0.7", v)
		}
		c.ConflictThreshold = f
	}
	for name, dst := range map[string]*int{"SW4RM_BUFFER_CAPACITY": &c.BufferCapacity, "SW4RM_MAX_PAYLOAD_BYTES": &c.MaxPayloadBytes,
		"SW4RM_MAX_RETRIES": &c.MaxRetries, "SW4RM_PRIVILEGED_BURST": &c.PrivilegedBurst, "SW4RM_HEARTBEAT_MISSES": &c.HeartbeatMisses} {
		if v, ok := os.LookupEnv(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return c, fmt.Errorf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	for name, dst := range map[string]*time.Duration{"SW4RM_AGENT_INIT_TIMEOUT": &c.AgentInitTimeout, "SW4RM_HEARTBEAT_INTERVAL": &c.HeartbeatInterval, "SW4RM_DELIVERY_LEASE": &c.DeliveryLease, "SW4RM_HITL_TIMEOUT": &c.HITLTimeout,
		"SW4RM_ACK_TIMEOUT": &c.AckTimeout, "SW4RM_DEDUP_WINDOW": &c.DedupWindow, "SW4RM_STREAM_RETENTION": &c.StreamRetention, "SW4RM_DLQ_RETENTION": &c.DLQRetention,
		"SW4RM_ROOM_TIMEOUT": &c.RoomTimeout, "SW4RM_PREEMPT_TIMEOUT": &c.PreemptTimeout, "SW4RM_TERMINATE_GRACE": &c.TerminateGrace,
		"SW4RM_AUTH_CLOCK_SKEW": &c.AuthClockSkew, "SW4RM_KEY_OVERLAP": &c.KeyOverlap} {
		if v, ok := os.LookupEnv(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("%s=%q: want a positive duration like 60s", name, v)
			}
			*dst = d
		}
	}
	if v, ok := os.LookupEnv("SW4RM_AUTH"); ok {
		m, err := auth.ParseMode(v)
		if err != nil {
			return c, err
		}
		c.Auth = m
	}
	if v, ok := os.LookupEnv("SW4RM_PRIVILEGED_RATE"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return c, fmt.Errorf("SW4RM_PRIVILEGED_RATE=%q: want a positive number of messages per second", v)
		}
		c.PrivilegedRate = f
	}
	if v, ok := os.LookupEnv("SW4RM_LANE_WEIGHTS"); ok {
		w, err := ParseLaneWeights(v)
		if err != nil {
			return c, fmt.Errorf("SW4RM_LANE_WEIGHTS: %w", err)
		}
		c.LaneWeights = w
	}
	return c, nil
}

// ParseMaxParallel reads max_parallel_instances per agent type (§9.1): "coder=2,reviewer=1"
// with "*" for every other type; empty means no limits.
func ParseMaxParallel(v string) (map[string]int, error) {
	out := map[string]int{}
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, num, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if !ok || strings.TrimSpace(name) == "" || err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want type=n pairs with positive n, like coder=2,*=8", part)
		}
		out[strings.TrimSpace(name)] = n
	}
	return out, nil
}

// ParseLaneWeights reads "PRIVILEGED,STANDARD,BULK" weights such as "6,3,1".
func ParseLaneWeights(v string) (store.LaneWeights, error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return store.LaneWeights{}, fmt.Errorf("%q: want three positive integers PRIVILEGED,STANDARD,BULK like 6,3,1", v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || x <= 0 {
			return store.LaneWeights{}, fmt.Errorf("%q: want three positive integers PRIVILEGED,STANDARD,BULK like 6,3,1", v)
		}
		n[i] = x
	}
	return store.LaneWeights{Privileged: n[0], Standard: n[1], Bulk: n[2]}, nil
}

// OpenRepos checks the repositories of SW4RM_REPOS and returns their manager: each must be a
// git repository (and git installed), and the worktree root, if set, absolute.
func OpenRepos(ctx context.Context, cfg Config) (*repos.Manager, error) {
	parsed, err := repos.Parse(cfg.Repos)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_REPOS: %w", err)
	}
	m, err := repos.New(ctx, parsed, cfg.WorktreeRoot)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_REPOS, SW4RM_WORKTREE_ROOT: %w", err)
	}
	return m, nil
}

// Roles selects what a process runs.
type Roles struct {
	// Server runs the gRPC frontend (and /healthz).
	Server bool
	// Worker runs the Temporal worker.
	Worker bool
}

// command names the sw4rm command that runs these roles.
func (r Roles) command() string {
	switch {
	case r.Server && r.Worker:
		return "sw4rm dev"
	case r.Server:
		return "sw4rm server"
	}
	return "sw4rm worker"
}

// CheckStore refuses a process that runs one role alone on the memory store. The memory store
// lives inside its process, so a server and a worker started apart without
// SW4RM_DATABASE_URL would each keep agents, messages, HITL invocations and the audit log of
// their own, and silently disagree: the server would answer from registrations the worker's
// activities never see.
func CheckStore(cfg Config, roles Roles) error {
	if cfg.DatabaseURL != "" || roles.Server == roles.Worker {
		return nil
	}
	return fmt.Errorf("`%s` needs SW4RM_DATABASE_URL (or --database-url): without it this process would keep agents, messages and the audit log "+
		"in a memory store of its own that no other sw4rm process sees, and a separate server and worker would silently disagree. "+
		"Point every sw4rm server and worker at one PostgreSQL, or run `sw4rm dev` for both roles in one process on the memory store", roles.command())
}

// CheckHITLKey refuses a server or worker started alone with HITL operators but without the
// decision key: a server could not vouch for its operators' decisions, a worker could not
// check them, and every decision would be refused after the operator was told it was sent.
// `sw4rm dev` generates a key in memory instead (LoadHITLDecisionKey).
func CheckHITLKey(cfg Config, roles Roles) error {
	if cfg.HITLDecisionKeyFile != "" || roles.Server == roles.Worker {
		return nil
	}
	if ops, err := hitl.ParseOperators(cfg.HITLOperators); err != nil || len(ops) == 0 {
		return nil // no operator to decide (a malformed list is reported at start)
	}
	return fmt.Errorf("`%s` has HITL operators (SW4RM_HITL_OPERATORS) but no HITL decision key: set SW4RM_HITL_DECISION_KEY_FILE "+
		"(or --hitl-decision-key-file) on every sw4rm server and worker to one file holding a 32-byte Ed25519 seed in hex, "+
		"e.g. made by `sw4rm keys generate --out FILE`; servers sign operators' decisions with it and workers check them (docs/hitl.md)", roles.command())
}

// LoadHITLDecisionKey returns the HITL decision key: read from cfg.HITLDecisionKeyFile when
// it is set; generated in memory for `sw4rm dev`, whose one process both signs and checks
// (a restart makes a new one, and waiting invocations reload the policy that names it);
// nil for a role alone without operators, which has nothing to sign or check.
func LoadHITLDecisionKey(cfg Config, roles Roles, log *slog.Logger) (ed25519.PrivateKey, error) {
	if cfg.HITLDecisionKeyFile != "" {
		key, err := auth.LoadPrivateKey(cfg.HITLDecisionKeyFile)
		if err != nil {
			return nil, fmt.Errorf("SW4RM_HITL_DECISION_KEY_FILE: %w", err)
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

// App is a running SW4RM process.
type App struct {
	cfg       Config
	log       *slog.Logger
	store     store.Store
	temporal  client.Client
	worker    sdkworker.Worker
	grpc      *grpc.Server
	grpcLis   net.Listener
	http      *http.Server
	httpLis   net.Listener
	httpTLS   bool
	stopOnce  sync.Once
	stopSweep context.CancelFunc
	// sweepDone closes when the router's Run has returned (its last writes are made).
	sweepDone chan struct{}
	metrics   *metrics.Router
	sink      *audit.Sink
	router    *router.Router
	relay     *outbox.Relay
	stopRelay context.CancelFunc
	// relayDone closes when the outbox relay's Run has returned.
	relayDone chan struct{}
	// auth authenticates the gRPC frontend's callers (nil without the server role).
	auth *frontend.Authenticator
	// reasoning answers EvaluateDebate and Summarize for the frontend and the activities.
	reasoning reasoning.Engine
	// stopMCP ends the import of the configured MCP servers; mcpDone closes when it has
	// returned.
	stopMCP context.CancelFunc
	mcpDone chan struct{}
	// toolWorkers poll the providers' task queues (startToolWorkers); closeTools ends the
	// executors' sessions and processes after them.
	toolWorkers []sdkworker.Worker
	closeTools  func()
}

// OpenStore opens the store the configuration names: PostgreSQL when DatabaseURL is set
// (applying migrations), else memory.
func OpenStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	if cfg.DatabaseURL == "" {
		return memory.New(), nil
	}
	return postgres.Open(ctx, cfg.DatabaseURL, log)
}

// Start opens the store, connects to Temporal and starts the requested roles. One role alone
// needs PostgreSQL (CheckStore). The TLS files and the ACL file are checked before anything
// is opened, so a bad one stops the process at once.
func Start(ctx context.Context, cfg Config, roles Roles, log *slog.Logger) (*App, error) {
	if err := CheckStore(cfg, roles); err != nil {
		return nil, err
	}
	if err := CheckHITLKey(cfg, roles); err != nil {
		return nil, err
	}
	sec, err := loadSecurity(cfg, roles, log)
	if err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return startWithStore(ctx, cfg, roles, log, st, sec)
}

// StartWithStore is Start over an already open store, which the App then owns and closes.
func StartWithStore(ctx context.Context, cfg Config, roles Roles, log *slog.Logger, st store.Store) (*App, error) {
	sec, err := loadSecurity(cfg, roles, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	return startWithStore(ctx, cfg, roles, log, st, sec)
}

// security is what the process's security settings load into.
type security struct {
	// tls configures the ports; nil means plaintext.
	tls *tls.Config
	// acl is the §6.3 policy; nil means none.
	acl *acl.Policy
}

// loadSecurity reads the TLS and ACL files, which only the server role uses.
func loadSecurity(cfg Config, roles Roles, log *slog.Logger) (security, error) {
	var sec security
	if !roles.Server {
		return sec, nil
	}
	var err error
	if sec.tls, err = ServerTLS(cfg, log); err != nil {
		return sec, err
	}
	if sec.acl, err = LoadACL(cfg); err != nil {
		return sec, err
	}
	if sec.tls == nil {
		log.Info("gRPC and HTTP ports in plaintext; set SW4RM_TLS_CERT_FILE and SW4RM_TLS_KEY_FILE for TLS")
	} else {
		log.Info("TLS on the gRPC and HTTP ports", "cert", cfg.TLSCertFile, "mutual", cfg.TLSClientCAFile != "")
	}
	if sec.acl != nil {
		log.Info("ACL loaded", "file", cfg.ACLFile, "rules", len(sec.acl.Rules), "default", sec.acl.Default)
	}
	return sec, nil
}

// LoadACL loads the §6.3 access-control list cfg.ACLFile names; nil when it names none.
func LoadACL(cfg Config) (*acl.Policy, error) {
	if cfg.ACLFile == "" {
		return nil, nil
	}
	p, err := acl.Load(cfg.ACLFile)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_ACL_FILE: %w", err)
	}
	return p, nil
}

func startWithStore(ctx context.Context, cfg Config, roles Roles, log *slog.Logger, st store.Store, sec security) (_ *App, err error) {
	a := &App{cfg: cfg, log: log, store: st}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	decisionKey, err := LoadHITLDecisionKey(cfg, roles, log)
	if err != nil {
		return nil, err
	}
	a.temporal, err = client.DialContext(ctx, client.Options{
		HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace, Logger: tlog.NewStructuredLogger(log),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	if err := worker.EnsureSearchAttributes(ctx, a.temporal, cfg.Namespace); err != nil {
		return nil, fmt.Errorf("register search attributes in namespace %s: %w", cfg.Namespace, err)
	}
	operators, err := hitl.ParseOperators(cfg.HITLOperators)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_HITL_OPERATORS: %w", err)
	}
	if operators, err = hitl.ParseOperatorKeys(operators, cfg.HITLOperatorKeys); err != nil {
		return nil, fmt.Errorf("SW4RM_HITL_OPERATOR_KEYS: %w", err)
	}
	hitlPolicy := hitl.Policy{Operators: operators, External: cfg.HITLExternal}
	if decisionKey != nil {
		hitlPolicy.DecisionKeys = []ed25519.PublicKey{decisionKey.Public().(ed25519.PublicKey)}
	}
	roomPolicy := voting.DefaultPolicy()
	if cfg.RoomStrategy != "" {
		if roomPolicy.Strategy, err = voting.ParseStrategy(cfg.RoomStrategy); err != nil {
			return nil, fmt.Errorf("SW4RM_ROOM_STRATEGY: %w", err)
		}
	}
	maxParallel, err := ParseMaxParallel(cfg.MaxParallel)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_MAX_PARALLEL: %w", err)
	}
	unavailable, err := inference.ParseUnavailablePolicy(cfg.InferenceUnavailable)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_INFERENCE_UNAVAILABLE: %w", err)
	}
	mcpProviders, err := mcp.ParseProviders(cfg.MCPServers)
	if err != nil {
		return nil, fmt.Errorf("SW4RM_MCP_SERVERS: %w", err)
	}
	execs, closeTools := toolExecutors(cfg, mcpProviders, log)
	a.closeTools = closeTools
	schedPolicy := taskadmission.Policy{MaxParallel: maxParallel, ConflictThreshold: cfg.ConflictThreshold, Unavailable: unavailable}
	if a.reasoning, err = reasoning.FromConfig(cfg.ReasoningExternal); err != nil {
		return nil, fmt.Errorf("SW4RM_REASONING_EXTERNAL: %w", err)
	}
	log.Info("reasoning engine", "engine", reasoning.NameOf(a.reasoning))
	if len(operators) == 0 && cfg.HITLExternal == "" {
		log.Warn("no HITL operators and no external HITL component: every HITL invocation gets its fallback at once (§15.3); set SW4RM_HITL_OPERATORS")
	}
	a.sink = audit.NewAsync(log, st.Audit(), 4096)
	sink := a.sink
	rt := router.New(st, router.Config{
		BufferCapacity: cfg.BufferCapacity, Lease: cfg.DeliveryLease, MaxPayloadBytes: cfg.MaxPayloadBytes,
		AckTimeout: cfg.AckTimeout, MaxRetries: cfg.MaxRetries, DedupWindow: cfg.DedupWindow, StreamRetention: cfg.StreamRetention,
		DLQRetention: cfg.DLQRetention, PrivilegedRate: cfg.PrivilegedRate, PrivilegedBurst: cfg.PrivilegedBurst, LaneWeights: cfg.LaneWeights,
		ACL: sec.acl,
	}, sink)
	a.router = rt
	a.metrics = metrics.New(st, rt.Config().BufferCapacity)
	rt.SetMetrics(a.metrics)
	// Outbox entries that store writes promised (the outbox): every process relays
	// them, so what one process wrote reaches Temporal even if that process dies.
	a.relay = outbox.New(st.Outbox(), outbox.Config{}, log, sink)
	bridge.RegisterOutboxHandlers(a.relay, a.temporal, st, sink, cfg.TaskQueue)
	relayCtx, stopRelay := context.WithCancel(context.Background())
	a.stopRelay, a.relayDone = stopRelay, make(chan struct{})
	go func() {
		defer close(a.relayDone)
		a.relay.Run(relayCtx)
	}()
	// ACKs of the scheduler's CONTROL messages, and the sections agents declare, go to the
	// agents' lifecycle workflows (§7).
	sched := bridge.NewScheduler(a.temporal, a.relay, st, sink)
	rt.SetScheduler(sched.Handlers(), sched)
	log.Info("sw4rm starting", "temporal", cfg.TemporalAddress, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue,
		"store", st.Kind(), "server", roles.Server, "worker", roles.Worker)

	if roles.Worker {
		repoManager, err := OpenRepos(ctx, cfg)
		if err != nil {
			return nil, err
		}
		log.Info("repositories", "repos", repoManager.RepoIDs(), "worktree_root", cfg.WorktreeRoot)
		a.worker = sdkworker.New(a.temporal, cfg.TaskQueue, sdkworker.Options{})
		worker.Register(a.worker, &activities.Activities{Store: st, Router: rt, Sink: sink, HITL: hitlPolicy, Scheduler: schedPolicy, Temporal: a.temporal,
			Reasoning: a.reasoning, Repos: repoManager})
		if err := a.worker.Start(); err != nil {
			return nil, fmt.Errorf("start worker: %w", err)
		}
		log.Info("worker polling", "task_queue", cfg.TaskQueue)
		if err := a.startToolWorkers(execs, st, sink, log); err != nil {
			return nil, err
		}
	}
	if roles.Server {
		a.auth = frontend.NewAuthenticator(frontend.AuthConfig{Mode: cfg.Auth, Keys: st.Keys(), Operators: hitlPolicy,
			Skew: cfg.AuthClockSkew, KeyOverlap: cfg.KeyOverlap, Sink: sink, Log: log})
		switch cfg.Auth {
		case auth.Off:
			log.Warn("authentication is off (SW4RM_AUTH=off): any client that reaches the port can act as any agent; fine on a laptop, never on a shared network (docs/security.md)")
		default:
			log.Info("authentication", "mode", cfg.Auth.String(), "clock_skew", cfg.AuthClockSkew.String(), "key_overlap", cfg.KeyOverlap.String())
		}
		// The router's timers (ACK timeouts, TTLs, response deadlines, retention) run in every
		// frontend; the store hands each expired item to exactly one of them.
		sweepCtx, stopSweep := context.WithCancel(context.Background())
		a.stopSweep, a.sweepDone = stopSweep, make(chan struct{})
		go func() {
			defer close(a.sweepDone)
			rt.Run(sweepCtx)
		}()
		fe := frontend.New(st, rt, a.temporal, a.relay, sink, log, frontend.Config{TaskQueue: cfg.TaskQueue, AgentInitTimeout: cfg.AgentInitTimeout,
			HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatMisses: cfg.HeartbeatMisses, HITLPolicy: hitlPolicy, HITLDecisionKey: decisionKey, HITLTimeout: cfg.HITLTimeout,
			RoomPolicy: roomPolicy, RoomTimeout: cfg.RoomTimeout, PreemptTimeout: cfg.PreemptTimeout, TerminateGrace: cfg.TerminateGrace, SchedulerPolicy: schedPolicy,
			ACL: sec.acl, Auth: a.auth, Reasoning: a.reasoning, ToolPreApproved: splitList(cfg.ToolPreApproved)})
		if err := RegisterBuiltinTools(ctx, execs, st.ToolProviders()); err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics.Handler())
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = fmt.Fprintf(w, "ok store=%s\n", st.Kind())
		})
		if err := a.serve(cfg, sec.tls, func(g *grpc.Server) { fe.Register(g) }, mux); err != nil {
			return nil, err
		}
		// In the background: a slow or absent MCP server must not hold the frontend back.
		mcpCtx, stopMCP := context.WithCancel(context.Background())
		a.stopMCP, a.mcpDone = stopMCP, make(chan struct{})
		go func() {
			defer close(a.mcpDone)
			ImportMCPProviders(mcpCtx, mcpProviders, st.ToolProviders(), sink, log)
		}()
	}
	return a, nil
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

// Stop shuts everything down: streams are cancelled (their unconfirmed rows stay for the
// next stream), the worker finishes its current tasks, then connections close.
func (a *App) Stop() { a.stopOnce.Do(a.stop) }

func (a *App) stop() {
	if a.grpc != nil {
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			a.grpc.Stop() // open StreamIncoming calls never end on their own
		}
	}
	if a.auth != nil {
		a.auth.Close()
	}
	if a.stopMCP != nil {
		a.stopMCP()
		<-a.mcpDone // before the store closes under it
	}
	if a.stopSweep != nil {
		// After the gRPC server: the router writes the confirmations it answered last.
		a.stopSweep()
		<-a.sweepDone
	}
	if a.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.http.Shutdown(ctx)
		cancel()
	}
	if a.stopRelay != nil {
		a.stopRelay()
		<-a.relayDone
	}
	for _, w := range a.toolWorkers {
		w.Stop()
	}
	if a.closeTools != nil {
		a.closeTools()
	}
	if a.worker != nil {
		a.worker.Stop()
	}
	if a.temporal != nil {
		a.temporal.Close()
	}
	if c, ok := a.reasoning.(io.Closer); ok {
		_ = c.Close() // after the worker and the gRPC server, its last callers
	}
	a.sink.Close() // flush audit rows before the store goes away
	if a.store != nil {
		a.store.Close()
	}
}
