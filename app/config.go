// Package app wires SW4RM's processes together: it opens the store, connects to Temporal,
// and runs the gRPC frontend, the Temporal worker, or both (`sw4rm server`, `sw4rm worker`,
// `sw4rm dev`). The end-to-end tests start the system through it exactly as the binary does.
//
// A process's settings are declared once, in the settings table (settings.go); Config holds
// their values, and Config.Resolve parses the structured ones before anything is opened.
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/builtin"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
)

// Config is the process configuration. Every field but ToolExecutors and PhysicalClock is a setting of the
// settings table (Settings), which gives its flag, its SW4RM_* variable, its default and its
// help; the comments here say what the process does with it.
type Config struct {
	// TemporalAddress is host:port of the Temporal frontend.
	TemporalAddress string
	// Namespace is the Temporal namespace.
	Namespace string
	// TaskQueue is the Temporal task queue of every workflow.
	TaskQueue string
	// WorkerStopTimeout is how long a stopping worker lets its running activities finish
	// before it cancels them (a rolling deploy's drain, docs/deploy.md).
	WorkerStopTimeout time.Duration
	// GRPCAddr is where the gRPC frontend listens.
	GRPCAddr string
	// HTTPAddr serves /healthz and /metrics; empty disables them.
	HTTPAddr string
	// DatabaseURL selects PostgreSQL; empty means the in-memory store.
	DatabaseURL string
	// GroupCommitWindow is how long PostgreSQL's group commit lingers for more writes.
	GroupCommitWindow time.Duration
	// GroupCommitFlushers is how many PostgreSQL group commits may be in flight at once.
	GroupCommitFlushers int
	// BufferCapacity is the per-agent inbound buffer (§13).
	BufferCapacity int
	// MaxPayloadBytes is the payload limit (§5.4).
	MaxPayloadBytes int
	// Tracing exports OpenTelemetry traces over OTLP (package telemetry).
	Tracing bool
	// TemporalUI is the Temporal UI's base URL, for the console's links to runs.
	TemporalUI string
	// CORSOrigins lists the web origins whose pages may call the gRPC port from a browser
	// (Connect, gRPC-Web), separated by commas; empty allows none.
	CORSOrigins string
	// StreamKeepAlive is how long a stream over Connect or gRPC-Web may stay silent before
	// it is sent an empty item, so that proxies do not cut it as idle.
	StreamKeepAlive time.Duration
	// AgentInitTimeout bounds INITIALIZING (§8.3).
	AgentInitTimeout time.Duration
	// HeartbeatInterval is how often each agent is heartbeated (§14).
	HeartbeatInterval time.Duration
	// HeartbeatMisses is the debounce before an agent is marked unavailable (§14).
	HeartbeatMisses int
	// DeliveryLease is how long an unconfirmed delivery waits before redelivery on the same
	// stream.
	DeliveryLease time.Duration
	// AckTimeout is the SENT → TIMED_OUT timeout (§11).
	AckTimeout time.Duration
	// MaxRetries is the retry budget before the DLQ (§21.1).
	MaxRetries int
	// DedupWindow is the idempotency window (§11.2).
	DedupWindow time.Duration
	// StreamRetention keeps confirmed rows for offset resumption (§5.5).
	StreamRetention time.Duration
	// DLQRetention bounds the dead-letter queue (§21.1).
	DLQRetention time.Duration
	// AuditRetention, MessageRetention, HandoffRetention, HITLRetention and ToolCallRetention
	// are how long finished records of each kind are kept (docs/reliability.md, "Retention");
	// zero keeps them forever.
	AuditRetention, MessageRetention, HandoffRetention, HITLRetention, ToolCallRetention time.Duration
	// PrivilegedRate and PrivilegedBurst limit each producer's PRIVILEGED lane, in messages/s
	// and messages (§7.3).
	PrivilegedRate  float64
	PrivilegedBurst int
	// LaneWeights are the PRIVILEGED, STANDARD and BULK delivery shares.
	LaneWeights store.LaneWeights
	// RoomTimeout bounds a negotiation room's wait for votes (§17.5).
	RoomTimeout time.Duration
	// HandoffCompletionTimeout is how long an accepted handoff whose budget sets no deadline
	// waits for CompleteHandoff before it expires (§17.6, docs/handoff.md).
	HandoffCompletionTimeout time.Duration
	// RoomStrategy is the room's vote aggregation (voting.ParseStrategy).
	RoomStrategy string
	// HITLOperators is the operator policy, "name=token[:REASON|REASON],..."
	// (hitl.ParseOperators, §15.1). Empty means no human can decide: every invocation gets
	// its fallback at once (§15.3).
	HITLOperators string
	// HITLTimeout is the deadline of invocations raised through HitlService.Decide.
	HITLTimeout time.Duration
	// HITLExternal is the address of an external HITL component serving the canonical
	// HitlService, empty for none (§15.4).
	HITLExternal string
	// HITLAgent is the agent_id of the HITL agent, which is sent every invocation as a
	// HITL_INVOCATION envelope and decides on the message plane (§15); empty for none.
	HITLAgent string
	// HITLUnavailablePolicy is the deployment's fallback when no human decides in time or the
	// HITL component is unavailable (§15.3, §15.4 hitl_unavailable_policy): DENY_BY_DEFAULT
	// (empty), AUTO_DECIDE_THRESHOLD or EXTEND_TIMEOUT. It applies to every invocation that
	// sets no fallback of its own; a negotiation or a room proposal may choose its own.
	HITLUnavailablePolicy string
	// HITLAutoThreshold is AUTO_DECIDE_THRESHOLD's auto-approve threshold in (0, 1], required
	// by it and refused with the other policies.
	HITLAutoThreshold float64
	// HITLMaxExtensions caps EXTEND_TIMEOUT's extensions, 1 to 3; zero means 3.
	HITLMaxExtensions int
	// HITLExtendBy is each EXTEND_TIMEOUT extension; zero means the wait's own timeout.
	HITLExtendBy time.Duration
	// HITLOperatorKeys are operators' own Ed25519 public keys, "name=<base64 key>,..."
	// (hitl.ParseOperatorKeys): a decision an operator signs with the matching private key
	// (`sw4rm hitl sign`) is accepted from a plain `temporal workflow signal`.
	HITLOperatorKeys string
	// HITLDecisionKeyFile is the deployment's HITL decision key, a file holding an Ed25519
	// seed (auth.LoadPrivateKey): servers attest the decisions of operators they
	// authenticated with it, workers verify them with its public key, so every server and
	// worker reads the same file. `sw4rm dev` generates one in memory when it is unset.
	HITLDecisionKeyFile string
	// MaxParallel is max_parallel_instances per agent type, "type=n,...,*=n"
	// (ParseMaxParallel, §9.1); empty means no limit.
	MaxParallel string
	// ConflictThreshold is the confidence below which a scope conflict goes to HITL (§9.3);
	// zero means 0.7.
	ConflictThreshold float64
	// InferenceUnavailable is what to do when the inference engine fails: serialize, hitl or
	// allow (inference.ParseUnavailablePolicy, §9.3).
	InferenceUnavailable string
	// ActivityReconcileInterval is how often each worker sweeps the activity buffer for
	// entries whose task's workflow ended without closing them (§10, package reconcile).
	ActivityReconcileInterval time.Duration
	// ActivityReconcileGrace is how old an activity entry must be before a sweep asks Temporal
	// about its task.
	ActivityReconcileGrace time.Duration
	// PreemptTimeout bounds an unanswered PREEMPT_REQUEST outside a non-preemptible section
	// (§7.2).
	PreemptTimeout time.Duration
	// TerminateGrace is TERMINATE's grace period before KILL (§7.2).
	TerminateGrace time.Duration
	// AgentHistoryLimit is the history length (events) past which an agent's lifecycle
	// workflow continues as new (docs/reliability.md, "Retention").
	AgentHistoryLimit int
	// Auth is how strictly callers are authenticated (§6.2, §6.5, docs/security.md).
	Auth auth.Mode
	// AuthClockSkew is how far a signed call's timestamp may be from the server's clock.
	AuthClockSkew time.Duration
	// KeyOverlap is how long a rotated-out agent key stays valid beside its successor (§23).
	KeyOverlap time.Duration
	// AuditAccess is which access decisions get an audit row: every refusal, or every
	// allowed call too (§6.5, docs/security.md).
	AuditAccess frontend.AccessAudit
	// TLSCertFile and TLSKeyFile are the PEM certificate and key of the gRPC and HTTP ports:
	// both set turn TLS on, and the certificate is read again when its files change; neither
	// means plaintext (see ServerTLS).
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile turns on mutual TLS: every client of either port must present a
	// certificate this PEM CA bundle verifies.
	TLSClientCAFile string
	// ACLFile is the access-control list of §6.3 (docs/acl.md); empty means no ACL.
	ACLFile string
	// ReasoningExternal is the address of an external reasoning engine serving the canonical
	// ReasoningProxy, which answers EvaluateDebate and Summarize for the frontend and the
	// workers' activities; empty means the builtin engine (docs/reasoning.md).
	ReasoningExternal string
	// Repos are the git repositories agents bind worktrees in (§16), comma-separated
	// repo_id=/absolute/path pairs (repos.Parse); each must be a git repository, checked when
	// a worker starts. Empty means none: every bind fails with worktree_not_found.
	Repos string
	// WorktreeRoot is where worktrees are made, as <root>/<repo_id>/<worktree_id>; empty
	// means inside each repository, in <repo>/.sw4rm-worktrees/<worktree_id>
	// (docs/worktrees.md).
	WorktreeRoot string
	// MCPServers are the MCP servers imported as tool providers when a server starts
	// (mcp.ParseProviders): "id=stdio:command args...;id2=http://url". Empty means none
	// (docs/tools.md).
	MCPServers string
	// ToolPreApproved lists the tools whose PRIVILEGED and FULL_ACCESS calls run without a
	// HITL wait: "provider/tool" patterns separated by commas, * allowed, e.g.
	// "builtin/process.run,ci/*" (§18.5.3, docs/tools.md).
	ToolPreApproved string
	// ToolApprovalTimeout bounds a tool call's wait for an operator's approval (§18.5.3).
	ToolApprovalTimeout time.Duration
	// ToolEgressAllow is the built-in provider's egress allowlist for process.run under
	// network_policy EGRESS_RESTRICTED: host:port entries separated by commas
	// (builtin.ParseEgressAllow). Empty means such calls are refused (docs/tools.md).
	ToolEgressAllow string
	// ToolReadPaths are paths process.run's processes may read and execute besides the
	// system paths (sandbox.DefaultReadPaths): absolute paths separated by commas.
	ToolReadPaths string
	// ToolWritePaths are paths every process.run process may also write, such as a shared
	// build cache; empty means none (docs/tools.md says why a shared path is a risk).
	ToolWritePaths string
	// ToolMaxProcs, ToolMaxFileBytes, ToolMaxMemoryBytes and ToolMaxOpenFiles are the
	// resource limits of one process.run call (sandbox.Limits).
	ToolMaxProcs, ToolMaxFileBytes, ToolMaxMemoryBytes, ToolMaxOpenFiles int
	// LogLevel is the level of the process's log, which the command builds.
	LogLevel slog.Level
	// AuditLog is the file the event stream is written to, with the process's own lines
	// (NewLogger); empty means none. `sw4rm dev` writes DevAuditLog when it is not set.
	AuditLog string
	// Verbose shows the whole event stream on the terminal too, not only its warnings and
	// errors (NewLogger).
	Verbose bool
	// ToolExecutors adds providers to the ones this process runs (the built-in provider and
	// the configured MCP servers), by provider id: for embedding and tests. It is no setting.
	ToolExecutors map[string]tools.Executor
	// PhysicalClock, when set, is the physical time of the process's HLC instead of the
	// host's clock (newClock): for tests that skew two processes' clocks. It is no setting.
	PhysicalClock func() time.Time
}

// DevHITLOperators is the HITL operator policy of `sw4rm dev` when none is configured: one
// operator, dev, with the token sw4rm-dev-token, so that HITL waits on a laptop can be decided
// rather than all falling back at once (§15.3). Never meant for a shared deployment.
const DevHITLOperators = "dev=sw4rm-dev-token"

// Resolved is a Config whose structured settings are parsed and checked (Config.Resolve):
// what a process starts with.
type Resolved struct {
	Config
	// HITLPolicy is the HITL operator policy: the operators with their own keys and the
	// external HITL component. Its decision keys are added when the process starts and reads
	// the decision key (LoadHITLDecisionKey).
	HITLPolicy hitl.Policy
	// RoomPolicy is the negotiation room's policy (§17.5) with the configured strategy.
	RoomPolicy voting.Policy
	// AdmissionPolicy is the scheduler's task admission policy (§9).
	AdmissionPolicy taskadmission.Policy
	// MCPProviders are the configured MCP servers.
	MCPProviders []mcp.Provider
	// RepoPaths are the configured repositories' paths by repo_id; whether each is a git
	// repository is checked when a worker starts (OpenRepos).
	RepoPaths map[string]string
	// PreApprovedTools are the tool patterns whose calls need no HITL approval.
	PreApprovedTools []string
}

// Resolve parses and checks every structured setting (operators and their keys, the room
// strategy, max-parallel, the inference-unavailable policy, the MCP servers and the
// repositories) without opening, reading or dialling anything, so that a malformed one stops
// the process at once. Its error names the setting by variable and flag.
func (c Config) Resolve() (Resolved, error) {
	r := Resolved{Config: c, RoomPolicy: voting.DefaultPolicy(), PreApprovedTools: splitList(c.ToolPreApproved)}
	operators, err := hitl.ParseOperators(c.HITLOperators)
	if err != nil {
		return r, settingError("SW4RM_HITL_OPERATORS", err)
	}
	if operators, err = hitl.ParseOperatorKeys(operators, c.HITLOperatorKeys); err != nil {
		return r, settingError("SW4RM_HITL_OPERATOR_KEYS", err)
	}
	if c.HITLAgent != "" {
		if perr := protocol.ValidateAgentID(c.HITLAgent); perr != nil {
			return r, settingError("SW4RM_HITL_AGENT", errors.New(perr.Msg))
		}
	}
	r.HITLPolicy = hitl.Policy{Operators: operators, External: c.HITLExternal, Agent: c.HITLAgent}
	if r.HITLPolicy.Fallback, err = c.hitlFallback(); err != nil {
		return r, err
	}
	if r.RoomPolicy.Strategy, err = voting.ParseStrategy(c.RoomStrategy); err != nil {
		return r, settingError("SW4RM_ROOM_STRATEGY", err)
	}
	if err := frontend.CheckCORSOrigins(splitList(c.CORSOrigins)); err != nil {
		return r, settingError("SW4RM_CORS_ORIGINS", err)
	}
	maxParallel, err := ParseMaxParallel(c.MaxParallel)
	if err != nil {
		return r, settingError("SW4RM_MAX_PARALLEL", err)
	}
	unavailable, err := inference.ParseUnavailablePolicy(c.InferenceUnavailable)
	if err != nil {
		return r, settingError("SW4RM_INFERENCE_UNAVAILABLE", err)
	}
	r.AdmissionPolicy = taskadmission.Policy{MaxParallel: maxParallel, ConflictThreshold: c.ConflictThreshold, Unavailable: unavailable}
	if r.MCPProviders, err = mcp.ParseProviders(c.MCPServers); err != nil {
		return r, settingError("SW4RM_MCP_SERVERS", err)
	}
	sb, err := c.toolSandbox()
	if err != nil {
		return r, err
	}
	for i := range r.MCPProviders {
		// Every stdio server is confined as process.run is (tools/mcp sandbox.go).
		r.MCPProviders[i].Server.Sandbox = sb
	}
	if _, err = builtin.ParseEgressAllow(c.ToolEgressAllow); err != nil {
		return r, settingError("SW4RM_TOOL_EGRESS_ALLOW", err)
	}
	if r.RepoPaths, err = repos.Parse(c.Repos); err != nil {
		return r, settingError("SW4RM_REPOS", err)
	}
	if c.HandoffCompletionTimeout > protocol.MaxHandoffCompletionTimeout {
		return r, settingError("SW4RM_HANDOFF_COMPLETION_TIMEOUT", fmt.Errorf("%s is over the limit of %s", c.HandoffCompletionTimeout, protocol.MaxHandoffCompletionTimeout))
	}
	return r, nil
}

// hitlFallback is the deployment's configured fallback (§15.4), nil when none is configured.
// Its error names the setting at fault.
func (c Config) hitlFallback() (*hitl.Fallback, error) {
	f := hitl.Fallback{Threshold: c.HITLAutoThreshold, MaxExtensions: c.HITLMaxExtensions, ExtendBy: c.HITLExtendBy}
	var err error
	if c.HITLUnavailablePolicy != "" {
		f.Policy, err = hitl.ParsePolicyName(c.HITLUnavailablePolicy)
	}
	if err == nil {
		err = f.CheckConfigured()
	}
	var ferr *hitl.FallbackError
	if errors.As(err, &ferr) {
		env := map[string]string{hitl.FieldPolicy: "SW4RM_HITL_UNAVAILABLE_POLICY", hitl.FieldThreshold: "SW4RM_HITL_AUTO_THRESHOLD",
			hitl.FieldMaxExtensions: "SW4RM_HITL_MAX_EXTENSIONS", hitl.FieldExtendBy: "SW4RM_HITL_EXTEND_BY"}[ferr.Field]
		return nil, settingError(env, errors.New(ferr.Msg))
	}
	if err != nil {
		return nil, settingError("SW4RM_HITL_UNAVAILABLE_POLICY", err)
	}
	if f.Policy == "" {
		return nil, nil
	}
	return &f, nil
}

// settingError is err about the setting whose variable is env, naming it.
func settingError(env string, err error) error {
	return fmt.Errorf("%s: %w", settingNamed(env), err)
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
	errWant := errors.New("want three positive integers PRIVILEGED,STANDARD,BULK like 6,3,1")
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return store.LaneWeights{}, errWant
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || x <= 0 {
			return store.LaneWeights{}, errWant
		}
		n[i] = x
	}
	return store.LaneWeights{Privileged: n[0], Standard: n[1], Bulk: n[2]}, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
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

// CheckHITLKey refuses a server or worker started alone with HITL operators or a HITL agent
// but without the decision key: a server could not vouch for their decisions, a worker could
// not check them, and every decision would be refused after it was sent.
// `sw4rm dev` generates a key in memory instead (LoadHITLDecisionKey).
func CheckHITLKey(cfg Config, roles Roles) error {
	if cfg.HITLDecisionKeyFile != "" || roles.Server == roles.Worker {
		return nil
	}
	if cfg.HITLAgent != "" {
		return fmt.Errorf("`%s` has a HITL agent (SW4RM_HITL_AGENT) but no HITL decision key: set SW4RM_HITL_DECISION_KEY_FILE "+
			"(or --hitl-decision-key-file) on every sw4rm server and worker to one file holding a 32-byte Ed25519 seed in hex, "+
			"e.g. made by `sw4rm keys generate --out FILE`; servers vouch for the agent's decisions with it and workers check them (docs/hitl.md)", roles.command())
	}
	if ops, err := hitl.ParseOperators(cfg.HITLOperators); err != nil || len(ops) == 0 {
		return nil // no operator to decide (a malformed list is Resolve's to report)
	}
	return fmt.Errorf("`%s` has HITL operators (SW4RM_HITL_OPERATORS) but no HITL decision key: set SW4RM_HITL_DECISION_KEY_FILE "+
		"(or --hitl-decision-key-file) on every sw4rm server and worker to one file holding a 32-byte Ed25519 seed in hex, "+
		"e.g. made by `sw4rm keys generate --out FILE`; servers sign operators' decisions with it and workers check them (docs/hitl.md)", roles.command())
}

// DefaultWorkerStopTimeout is SW4RM_WORKER_STOP_TIMEOUT's default: long enough for an
// activity of the task path to finish, and shorter than Kubernetes' default 30 s grace period,
// so a pod's SIGTERM drains before its SIGKILL.
const DefaultWorkerStopTimeout = 20 * time.Second
