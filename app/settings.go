package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/reconcile"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Setting is one setting of a sw4rm process, declared once in the settings table: its flag,
// its SW4RM_* variable, its help, its default and the Config field it lands in. Everything
// else is derived from the table: DefaultConfig, the variables' overlay (Config.FromEnv), the
// flags of `sw4rm server`, `sw4rm worker` and `sw4rm dev` with their precedence over the
// variables (Flags), and the table in README.md (SettingsMarkdown).
type Setting struct {
	// Flag is the command-line flag, without its dashes.
	Flag string
	// Env is the SW4RM_* environment variable.
	Env string
	// Help is the flag's help; --help shows it followed by "(Env)".
	Help string
	// Doc is the setting's meaning in README.md, when it says more than Help (which may hold
	// no backquote: pflag would take the quoted word for the flag's value name).
	Doc string
	// DefaultDoc is the default column in README.md, when the default needs words.
	DefaultDoc string

	bind binding
}

// binding is where a setting lands in Config, and how its text is read and written.
type binding interface {
	// reset sets the field of c to the setting's default.
	reset(c *Config)
	// parse sets the field of c from text, checking it.
	parse(c *Config, text string) error
	// format returns the field of c as text parse reads.
	format(c *Config) string
	// copy copies the field from src to dst.
	copy(dst, src *Config)
	// kind is the value's type name in --help ("string", "int", "duration", "float64").
	kind() string
	// target is the field's address in c, which the table's test matches to Config's fields.
	target(c *Config) any
}

// field is a binding to one field of type T.
type field[T any] struct {
	at       func(*Config) *T
	def      T
	typeName string
	read     func(string) (T, error)
	write    func(T) string
}

func (f field[T]) reset(c *Config) { *f.at(c) = f.def }

func (f field[T]) parse(c *Config, text string) error {
	v, err := f.read(text)
	if err != nil {
		return err
	}
	*f.at(c) = v
	return nil
}

func (f field[T]) format(c *Config) string { return f.write(*f.at(c)) }

func (f field[T]) copy(dst, src *Config) { *f.at(dst) = *f.at(src) }

func (f field[T]) kind() string { return f.typeName }

func (f field[T]) target(c *Config) any { return f.at(c) }

// text binds a string setting; every value is valid (empty usually means "none").
func text(at func(*Config) *string, def string) binding {
	return field[string]{at: at, def: def, typeName: "string",
		read: func(s string) (string, error) { return s, nil }, write: func(s string) string { return s }}
}

// positiveInt binds an integer setting that must be positive.
func positiveInt(at func(*Config) *int, def int) binding {
	return field[int]{at: at, def: def, typeName: "int", write: strconv.Itoa, read: func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return 0, errors.New("want a positive integer")
		}
		return n, nil
	}}
}

// positiveDuration binds a duration setting that must be positive.
func positiveDuration(at func(*Config) *time.Duration, def time.Duration) binding {
	return field[time.Duration]{at: at, def: def, typeName: "duration", write: time.Duration.String, read: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, errors.New("want a positive duration like 60s")
		}
		return d, nil
	}}
}

// nonNegativeDuration binds a duration setting that may be zero.
func nonNegativeDuration(at func(*Config) *time.Duration, def time.Duration) binding {
	return field[time.Duration]{at: at, def: def, typeName: "duration", write: time.Duration.String, read: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, errors.New("want a duration like 200us, or 0")
		}
		return d, nil
	}}
}

// number binds a float setting that must lie in (0, upper], saying want when it does not;
// upper 0 means no upper bound.
func number(at func(*Config) *float64, def, upper float64, want string) binding {
	return field[float64]{at: at, def: def, typeName: "float64",
		write: func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) },
		read: func(s string) (float64, error) {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f <= 0 || (upper > 0 && f > upper) {
				return 0, errors.New(want)
			}
			return f, nil
		}}
}

// laneWeights binds the PRIVILEGED,STANDARD,BULK weights, written "6,3,1".
func laneWeights(at func(*Config) *store.LaneWeights, def store.LaneWeights) binding {
	return field[store.LaneWeights]{at: at, def: def, typeName: "string", read: ParseLaneWeights,
		write: func(w store.LaneWeights) string { return fmt.Sprintf("%d,%d,%d", w.Privileged, w.Standard, w.Bulk) }}
}

// authMode binds the authentication mode, written off, optional or required.
func authMode(at func(*Config) *auth.Mode, def auth.Mode) binding {
	return field[auth.Mode]{at: at, def: def, typeName: "string", write: auth.Mode.String, read: func(s string) (auth.Mode, error) {
		m, err := auth.ParseMode(s)
		if err != nil {
			return m, errors.New("want off, optional or required") // ParseMode's own error names SW4RM_AUTH
		}
		return m, nil
	}}
}

// accessAudit binds which access decisions are audited, written refused, all or sample:<n>.
func accessAudit(at func(*Config) *frontend.AccessAudit, def frontend.AccessAudit) binding {
	return field[frontend.AccessAudit]{at: at, def: def, typeName: "string", write: frontend.AccessAudit.String,
		read: func(s string) (frontend.AccessAudit, error) {
			v, err := frontend.ParseAccessAudit(s)
			if err != nil {
				return v, errors.New("want refused, all or sample:<n>") // ParseAccessAudit's own error names the variable
			}
			return v, nil
		}}
}

// boolean binds an on/off setting, written true or false (or 1 and 0; empty is false); its
// flag alone, with no value, means true.
func boolean(at func(*Config) *bool, def bool) binding {
	return field[bool]{at: at, def: def, typeName: "bool", write: strconv.FormatBool, read: func(s string) (bool, error) {
		if s == "" {
			return false, nil // SW4RM_VERBOSE= turns it off, as unset does
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, errors.New("want true or false")
		}
		return b, nil
	}}
}

// logLevel binds a slog level, written debug, info, warn or error.
func logLevel(at func(*Config) *slog.Level, def slog.Level) binding {
	return field[slog.Level]{at: at, def: def, typeName: "string",
		write: func(l slog.Level) string { return strings.ToLower(l.String()) },
		read: func(s string) (slog.Level, error) {
			var l slog.Level
			if err := l.UnmarshalText([]byte(s)); err != nil {
				return l, errors.New("want debug, info, warn or error")
			}
			return l, nil
		}}
}

// settings is the settings table, in the order README.md lists them. Help strings hold no
// backquote (see Setting.Doc).
var settings = []Setting{
	{Flag: "temporal-address", Env: "SW4RM_TEMPORAL_ADDRESS", Help: "Temporal frontend host:port",
		bind: text(func(c *Config) *string { return &c.TemporalAddress }, "127.0.0.1:7233")},
	{Flag: "namespace", Env: "SW4RM_NAMESPACE", Help: "Temporal namespace",
		bind: text(func(c *Config) *string { return &c.Namespace }, "default")},
	{Flag: "task-queue", Env: "SW4RM_TASK_QUEUE", Help: "Temporal task queue",
		Doc:  "Temporal task queue of every workflow (tool calls run on `<task queue>-tool-<provider>`)",
		bind: text(func(c *Config) *string { return &c.TaskQueue }, "sw4rm")},
	{Flag: "worker-stop-timeout", Env: "SW4RM_WORKER_STOP_TIMEOUT", Help: "how long a stopping worker lets running activities finish",
		Doc:  "how long a stopping worker (SIGTERM) lets its running activities finish before cancelling them; a rolling deploy's drain ([deploy.md](docs/deploy.md))",
		bind: nonNegativeDuration(func(c *Config) *time.Duration { return &c.WorkerStopTimeout }, DefaultWorkerStopTimeout)},
	{Flag: "grpc-addr", Env: "SW4RM_GRPC_ADDR", Help: "gRPC listen address (also Connect and gRPC-Web over HTTP/1.1)",
		Doc:  "listen address of the frontend: every canonical service as gRPC over HTTP/2, and as Connect and gRPC-Web over HTTP/1.1 and HTTP/2 ([docs/http1.md](docs/http1.md))",
		bind: text(func(c *Config) *string { return &c.GRPCAddr }, ":50051")},
	{Flag: "http-addr", Env: "SW4RM_HTTP_ADDR", Help: "HTTP listen address for /healthz, /metrics and (server) /descriptors.binpb; empty disables",
		Doc:  "HTTP listen address of `/healthz` and `/metrics` (every process, `sw4rm worker` too: docs/observability.md) and, with the server role, `/descriptors.binpb` (the gRPC port's services as a `FileDescriptorSet`, for clients without reflection: docs/http1.md); empty disables",
		bind: text(func(c *Config) *string { return &c.HTTPAddr }, ":8080")},
	{Flag: "database-url", Env: "SW4RM_DATABASE_URL", Help: "PostgreSQL URL; empty uses the in-memory store",
		Doc:        "PostgreSQL URL; migrations are applied on start. `sw4rm server` and `sw4rm worker` refuse to start without it",
		DefaultDoc: "empty = memory (`sw4rm dev` only)",
		bind:       text(func(c *Config) *string { return &c.DatabaseURL }, "")},
	{Flag: "group-commit-window", Env: "SW4RM_GROUP_COMMIT_WINDOW", Help: "how long a PostgreSQL group commit waits for more writes; 0 sends at once",
		Doc: "how long the message plane's group commit waits for more concurrent writes before it sends a group (PostgreSQL only); " +
			"0 sends as soon as a connection is free, so groups form from the writes that arrived meanwhile (docs/messaging.md)",
		bind: nonNegativeDuration(func(c *Config) *time.Duration { return &c.GroupCommitWindow }, 0)},
	{Flag: "group-commit-flushers", Env: "SW4RM_GROUP_COMMIT_FLUSHERS", Help: "how many PostgreSQL group commits may be in flight at once",
		Doc:  "how many of the message plane's group commits may be in flight at once, each on a connection of its own (PostgreSQL only); more make smaller groups and overlap more commits, worth it when PostgreSQL has cores to spare (docs/messaging.md)",
		bind: positiveInt(func(c *Config) *int { return &c.GroupCommitFlushers }, postgres.DefaultGroupCommitFlushers)},
	{Flag: "buffer-capacity", Env: "SW4RM_BUFFER_CAPACITY", Help: "inbound buffer capacity per agent, §13",
		bind: positiveInt(func(c *Config) *int { return &c.BufferCapacity }, router.DefaultBufferCapacity)},
	{Flag: "max-payload-bytes", Env: "SW4RM_MAX_PAYLOAD_BYTES", Help: "largest payload admitted, §5.4",
		Doc:  "largest payload admitted; larger ones get `oversize_payload` (§5.4). gRPC reads requests up to 4 × this + 64 KiB",
		bind: positiveInt(func(c *Config) *int { return &c.MaxPayloadBytes }, 1<<20)},
	{Flag: "stream-keepalive", Env: "SW4RM_STREAM_KEEPALIVE", Help: "silence after which a Connect or gRPC-Web stream is sent an empty keep-alive item",
		Doc:  "how long `StreamIncoming` and `CallStream` over Connect or gRPC-Web (HTTP/1.1) stay silent before they send an empty keep-alive item (`seq` 0, `frame_no` 0), which clients skip, so that proxies do not cut them as idle (docs/http1.md); native gRPC uses HTTP/2 pings",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.StreamKeepAlive }, frontend.DefaultStreamKeepAlive)},
	{Flag: "temporal-ui", Env: "SW4RM_TEMPORAL_UI", Help: "the Temporal UI's base URL, for the console's links to runs; empty shows none",
		Doc:        "the Temporal UI's base URL (e.g. `http://localhost:8233`), which the operator console links each run to (`hitl/<id>`, `dag/<id>`, tasks); empty shows no links. `make dev` sets it",
		DefaultDoc: "empty = no links",
		bind:       text(func(c *Config) *string { return &c.TemporalUI }, "")},
	{Flag: "cors-origins", Env: "SW4RM_CORS_ORIGINS", Help: "web origins whose pages may call the gRPC port from a browser, separated by commas (scheme://host[:port], or *)",
		Doc: "web origins (`scheme://host[:port]`, or `*`) whose pages may call the gRPC port from a browser over Connect or gRPC-Web, " +
			"separated by commas: the port answers their CORS preflights and lets them read the `sw4rm-*` headers and trailers " +
			"(docs/http1.md). A page served from the port's own origin needs none",
		DefaultDoc: "empty = none",
		bind:       text(func(c *Config) *string { return &c.CORSOrigins }, "")},
	{Flag: "agent-init-timeout", Env: "SW4RM_AGENT_INIT_TIMEOUT", Help: "INITIALIZING timeout, §8.3",
		Doc:  "INITIALIZING → FAILED `init_timeout` (§8.3)",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.AgentInitTimeout }, 60*time.Second)},
	{Flag: "heartbeat-interval", Env: "SW4RM_HEARTBEAT_INTERVAL", Help: "how often each agent is heartbeated, §14",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.HeartbeatInterval }, 30*time.Second)},
	{Flag: "heartbeat-misses", Env: "SW4RM_HEARTBEAT_MISSES", Help: "missed heartbeat intervals before an agent is marked unavailable and FAILED, §14",
		Doc:  "missed heartbeat intervals before an agent is marked unavailable and FAILED `agent_unavailable`, what it holds released (§14, §8.4)",
		bind: positiveInt(func(c *Config) *int { return &c.HeartbeatMisses }, 3)},
	{Flag: "delivery-lease", Env: "SW4RM_DELIVERY_LEASE", Help: "redelivery lease of unconfirmed stream rows",
		Doc:  "unconfirmed deliveries are redelivered on the same stream after this",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.DeliveryLease }, router.DefaultLease)},
	{Flag: "hitl-operators", Env: "SW4RM_HITL_OPERATORS", Help: "HITL operators, name=token[:REASON|REASON],...",
		Doc:        "HITL operators `name=token[:REASON|REASON],…`; empty means every invocation gets its fallback at once (§15.1, §15.3)",
		DefaultDoc: "empty (`sw4rm dev`: `" + DevHITLOperators + "` unless set, even to empty)",
		bind:       text(func(c *Config) *string { return &c.HITLOperators }, "")},
	{Flag: "hitl-decision-key-file", Env: "SW4RM_HITL_DECISION_KEY_FILE",
		Help: "file holding the HITL decision key (Ed25519 seed), the same on every server and worker",
		Doc: "file holding the HITL decision key (an Ed25519 seed in hex), the same on every server and worker: servers attest " +
			"their operators' decisions with it, workers check them; required by `sw4rm server` and `sw4rm worker` when operators are configured",
		DefaultDoc: "empty (`sw4rm dev`: a key generated in memory)",
		bind:       text(func(c *Config) *string { return &c.HITLDecisionKeyFile }, "")},
	{Flag: "hitl-operator-keys", Env: "SW4RM_HITL_OPERATOR_KEYS",
		Help: "operators' own Ed25519 public keys for signed raw decisions, name=<base64>,...",
		Doc:  "operators' own Ed25519 public keys `name=<base64>,…`, for decisions signed with `sw4rm hitl sign` and sent as a plain Temporal signal",
		bind: text(func(c *Config) *string { return &c.HITLOperatorKeys }, "")},
	{Flag: "hitl-timeout", Env: "SW4RM_HITL_TIMEOUT", Help: "deadline of invocations raised by HitlService.Decide",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.HITLTimeout }, time.Hour)},
	{Flag: "hitl-external", Env: "SW4RM_HITL_EXTERNAL", Help: "address of an external HITL component",
		Doc:  "address of an external HITL component (a canonical HitlService, §15.4)",
		bind: text(func(c *Config) *string { return &c.HITLExternal }, "")},
	{Flag: "hitl-agent", Env: "SW4RM_HITL_AGENT", Help: "agent_id of the HITL agent, sent every invocation as a HITL_INVOCATION message, §15",
		Doc: "agent_id of the HITL agent: every invocation is sent to it as a `HITL_INVOCATION` envelope, and it decides by sending " +
			"`scheduler` the §15.2 HITL_DECISION; needs the decision key ([docs/hitl.md](docs/hitl.md), \"A HITL agent on the message plane\")",
		bind: text(func(c *Config) *string { return &c.HITLAgent }, "")},
	{Flag: "hitl-unavailable-policy", Env: "SW4RM_HITL_UNAVAILABLE_POLICY",
		Help: "fallback when no human decides in time or the HITL component is unavailable: DENY_BY_DEFAULT, AUTO_DECIDE_THRESHOLD or EXTEND_TIMEOUT, §15.4",
		Doc: "fallback when no human decides in time or the HITL component is unavailable (§15.3, §15.4 `hitl_unavailable_policy`): " +
			"`DENY_BY_DEFAULT`, `AUTO_DECIDE_THRESHOLD` or `EXTEND_TIMEOUT`, for every invocation that sets none of its own; a negotiation " +
			"or a room proposal may choose its own ([docs/hitl.md](docs/hitl.md))",
		DefaultDoc: "empty = `DENY_BY_DEFAULT`",
		bind:       text(func(c *Config) *string { return &c.HITLUnavailablePolicy }, "")},
	{Flag: "hitl-auto-threshold", Env: "SW4RM_HITL_AUTO_THRESHOLD",
		Help:       "auto-approve threshold in (0, 1] of AUTO_DECIDE_THRESHOLD, which requires it",
		DefaultDoc: "none",
		bind:       number(func(c *Config) *float64 { return &c.HITLAutoThreshold }, 0, 1, "want a threshold in (0, 1] like 0.8")},
	{Flag: "hitl-max-extensions", Env: "SW4RM_HITL_MAX_EXTENSIONS", Help: "most extensions of EXTEND_TIMEOUT, 1 to 3, §15.4",
		DefaultDoc: "empty = `3`",
		bind:       positiveInt(func(c *Config) *int { return &c.HITLMaxExtensions }, 0)},
	{Flag: "hitl-extend-by", Env: "SW4RM_HITL_EXTEND_BY", Help: "each extension of EXTEND_TIMEOUT; 0 means the wait's own timeout, §15.4",
		DefaultDoc: "`0` = the wait's timeout",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.HITLExtendBy }, 0)},
	{Flag: "ack-timeout", Env: "SW4RM_ACK_TIMEOUT", Help: "SENT → TIMED_OUT timeout, §11",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.AckTimeout }, router.DefaultAckTimeout)},
	{Flag: "max-retries", Env: "SW4RM_MAX_RETRIES", Help: "retry budget before the dead-letter queue, §21.1",
		bind: positiveInt(func(c *Config) *int { return &c.MaxRetries }, router.DefaultMaxRetries)},
	{Flag: "dedup-window", Env: "SW4RM_DEDUP_WINDOW", Help: "idempotency window, §11.2",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.DedupWindow }, router.DefaultDedupWindow)},
	{Flag: "stream-retention", Env: "SW4RM_STREAM_RETENTION", Help: "how long confirmed rows stay resumable, §5.5",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.StreamRetention }, router.DefaultStreamRetention)},
	{Flag: "dlq-retention", Env: "SW4RM_DLQ_RETENTION", Help: "dead-letter retention, §21.1",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.DLQRetention }, router.DefaultDLQRetention)},
	{Flag: "audit-retention", Env: "SW4RM_AUDIT_RETENTION", Help: "how long audit events are kept; 0 keeps them forever, §19",
		Doc:        "how long audit events are kept (§19); older ones are deleted in batches by every frontend's sweep ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		DefaultDoc: "`720h` (30 days); `0` keeps them forever",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.AuditRetention }, router.DefaultAuditRetention)},
	{Flag: "message-retention", Env: "SW4RM_MESSAGE_RETENTION", Help: "how long finished messages are kept; 0 keeps them forever, §11",
		Doc: "how long a finished message (a terminal state, nothing left to deliver, no response awaited) is kept for `GetMessage` and " +
			"duplicate detection (§11); never less than `SW4RM_DEDUP_WINDOW` or `SW4RM_STREAM_RETENTION` ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		DefaultDoc: "`168h` (7 days); `0` keeps them forever",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.MessageRetention }, router.DefaultMessageRetention)},
	{Flag: "handoff-retention", Env: "SW4RM_HANDOFF_RETENTION", Help: "how long ended handoffs and their fences are kept; 0 keeps them forever, §17.6",
		Doc: "how long ended handoffs (rejected, completed, cancelled, expired) and the fences of handoffs no longer open are kept (§17.6); " +
			"open handoffs and their fences stay ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		DefaultDoc: "`168h` (7 days); `0` keeps them forever",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.HandoffRetention }, router.DefaultHandoffRetention)},
	{Flag: "hitl-retention", Env: "SW4RM_HITL_RETENTION", Help: "how long decided HITL invocations are kept; 0 keeps them forever, §15",
		Doc:        "how long decided HITL invocations stay listed after their decision (§15); pending ones stay ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		DefaultDoc: "`168h` (7 days); `0` keeps them forever",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.HITLRetention }, router.DefaultHITLRetention)},
	{Flag: "tool-call-retention", Env: "SW4RM_TOOL_CALL_RETENTION", Help: "how long ended tool calls and their frames are kept; 0 keeps them forever, §18.2",
		Doc:        "how long an ended tool call and its stored frames stay resumable (§18.2), counted from its start; calls in flight stay ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		DefaultDoc: "`168h` (7 days); `0` keeps them forever",
		bind:       nonNegativeDuration(func(c *Config) *time.Duration { return &c.ToolCallRetention }, router.DefaultToolCallRetention)},
	{Flag: "max-parallel", Env: "SW4RM_MAX_PARALLEL", Help: "max_parallel_instances per agent type, type=n,... with * for every other type, §9.1",
		Doc:        "max_parallel_instances per agent type, e.g. `coder=2,*=8` (§9.1)",
		DefaultDoc: "empty = no limit",
		bind:       text(func(c *Config) *string { return &c.MaxParallel }, "")},
	{Flag: "reasoning-external", Env: "SW4RM_REASONING_EXTERNAL",
		Help: "address of an external reasoning engine (a ReasoningProxy) for EvaluateDebate and Summarize; empty uses the builtin one",
		Doc: "address of an external reasoning engine (a canonical ReasoningProxy) that answers `EvaluateDebate` and `Summarize` for the " +
			"server and the workers; its failures answer `Unavailable` ([docs/reasoning.md](docs/reasoning.md))",
		DefaultDoc: "empty = the builtin engine",
		bind:       text(func(c *Config) *string { return &c.ReasoningExternal }, "")},
	{Flag: "conflict-threshold", Env: "SW4RM_CONFLICT_THRESHOLD", Help: "confidence below which a scope conflict goes to HITL, §9.3",
		bind: number(func(c *Config) *float64 { return &c.ConflictThreshold }, 0.7, 1, "want a confidence in (0, 1] like 0.7")},
	{Flag: "inference-unavailable", Env: "SW4RM_INFERENCE_UNAVAILABLE",
		Help:       "what to do when the inference engine fails: serialize, hitl or allow, §9.3",
		DefaultDoc: "empty = `serialize`",
		bind:       text(func(c *Config) *string { return &c.InferenceUnavailable }, "")},
	{Flag: "activity-reconcile-interval", Env: "SW4RM_ACTIVITY_RECONCILE_INTERVAL",
		Help: "how often each worker reconciles the activity buffer with Temporal, §10",
		Doc: "how often each worker sweeps the activity buffer for entries whose task's workflow has closed (terminated, timed out, " +
			"failed) or is unknown to Temporal, and moves them to the history, audited `activity.reconciled` (§10, " +
			"[docs/scheduler.md](docs/scheduler.md)); each sweep asks Temporal once per entry older than the grace",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.ActivityReconcileInterval }, reconcile.DefaultInterval)},
	{Flag: "activity-reconcile-grace", Env: "SW4RM_ACTIVITY_RECONCILE_GRACE",
		Help: "how old an activity entry must be before the reconciliation asks Temporal about its task, §10",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.ActivityReconcileGrace }, reconcile.DefaultGrace)},
	{Flag: "preempt-timeout", Env: "SW4RM_PREEMPT_TIMEOUT",
		Help: "how long an unanswered PREEMPT_REQUEST waits before forced preemption, §7.2",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.PreemptTimeout }, 10*time.Minute)},
	{Flag: "terminate-grace", Env: "SW4RM_TERMINATE_GRACE", Help: "TERMINATE's grace period before KILL, §7.2",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.TerminateGrace }, 3*time.Second)},
	{Flag: "agent-history-limit", Env: "SW4RM_AGENT_HISTORY_LIMIT", Help: "history events past which an agent's lifecycle workflow continues as new",
		Doc: "history length (events) past which an agent's lifecycle workflow `agent/<agent_id>` continues as new, carrying its state and " +
			"tasks, even if Temporal has not suggested it; applies to agents registered after it is set ([docs/reliability.md](docs/reliability.md), \"Retention\")",
		bind: positiveInt(func(c *Config) *int { return &c.AgentHistoryLimit }, workflows.AgentHistoryLimit)},
	{Flag: "privileged-rate", Env: "SW4RM_PRIVILEGED_RATE", Help: "PRIVILEGED messages/s per producer before overflow to STANDARD, §7.3",
		bind: number(func(c *Config) *float64 { return &c.PrivilegedRate }, router.DefaultPrivilegedRate, 0,
			"want a positive number of messages per second")},
	{Flag: "privileged-burst", Env: "SW4RM_PRIVILEGED_BURST", Help: "PRIVILEGED burst per producer",
		bind: positiveInt(func(c *Config) *int { return &c.PrivilegedBurst }, router.DefaultPrivilegedBurst)},
	{Flag: "lane-weights", Env: "SW4RM_LANE_WEIGHTS", Help: "PRIVILEGED,STANDARD,BULK delivery weights",
		bind: laneWeights(func(c *Config) *store.LaneWeights { return &c.LaneWeights }, router.DefaultLaneWeights)},
	{Flag: "room-timeout", Env: "SW4RM_ROOM_TIMEOUT", Help: "negotiation room wait for votes, §17.5",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.RoomTimeout }, 10*time.Minute)},
	{Flag: "room-strategy", Env: "SW4RM_ROOM_STRATEGY",
		Help: "vote aggregation: confidence_weighted, simple_average, majority_vote, borda_count",
		bind: text(func(c *Config) *string { return &c.RoomStrategy }, "confidence_weighted")},
	{Flag: "handoff-completion-timeout", Env: "SW4RM_HANDOFF_COMPLETION_TIMEOUT",
		Help: "how long an accepted handoff waits for completion before it expires, when its budget sets no deadline, §17.6",
		Doc: "how long an accepted handoff waits for `CompleteHandoff` before it expires and its originator is told, when the request's " +
			"budget sets no deadline (§17.6, [docs/handoff.md](docs/handoff.md)); at most 720h",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.HandoffCompletionTimeout }, protocol.DefaultHandoffCompletionTimeout)},
	{Flag: "auth", Env: "SW4RM_AUTH", Help: "authentication: off, optional or required, §6.2, docs/security.md",
		Doc: "authentication: `off`, `optional` or `required`, whether calls must be signed by their agent's key or made by an " +
			"operator, and authorized (§6.2, §6.5, [docs/security.md](docs/security.md)); `sw4rm dev` warns when off",
		bind: authMode(func(c *Config) *auth.Mode { return &c.Auth }, auth.Off)},
	{Flag: "auth-clock-skew", Env: "SW4RM_AUTH_CLOCK_SKEW", Help: "largest clock difference of a signed call",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.AuthClockSkew }, frontend.DefaultClockSkew)},
	{Flag: "key-overlap", Env: "SW4RM_KEY_OVERLAP", Help: "how long a rotated-out agent key stays valid, §23",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.KeyOverlap }, frontend.DefaultKeyOverlap)},
	{Flag: "audit-access", Env: "SW4RM_AUDIT_ACCESS", Help: "access decisions audited: refused, all (every allowed one too) or sample:N (one allowed in N), §6.5",
		Doc: "access decisions written to the audit log: `refused` (each refusal, `auth.refused` and `access.refused`), `all` (each allowed decision too, " +
			"`auth.allowed` with its method, principal and mode: one row per call and one per stream, also with authentication off; `access.allowed` " +
			"for each tool call, resource access and ACL decision, with the rule that decided) or `sample:N` (every refusal, one allowed decision in N of each kind); " +
			"every decision, written or not, is counted in `sw4rm_access_decisions_total` (§6.5, [docs/security.md](docs/security.md))",
		bind: accessAudit(func(c *Config) *frontend.AccessAudit { return &c.AuditAccess }, frontend.AuditRefused)},
	{Flag: "tls-cert-file", Env: "SW4RM_TLS_CERT_FILE",
		Help: "PEM certificate of the gRPC and HTTP ports; with --tls-key-file turns on TLS, reloaded when the file changes",
		Doc: "PEM certificate of the gRPC and HTTP ports; with `SW4RM_TLS_KEY_FILE` turns TLS on, one alone (or a file that does not load) " +
			"refuses to start. The certificate is read again when its files change, so rotation needs no restart",
		DefaultDoc: "empty = plaintext",
		bind:       text(func(c *Config) *string { return &c.TLSCertFile }, "")},
	{Flag: "tls-key-file", Env: "SW4RM_TLS_KEY_FILE", Help: "PEM private key of --tls-cert-file",
		Doc:  "PEM private key of `SW4RM_TLS_CERT_FILE`",
		bind: text(func(c *Config) *string { return &c.TLSKeyFile }, "")},
	{Flag: "tls-client-ca-file", Env: "SW4RM_TLS_CLIENT_CA_FILE",
		Help: "PEM CA bundle; clients must present a certificate it verifies (mutual TLS)",
		Doc:  "PEM CA bundle; set, both ports require a client certificate it verifies (mutual TLS)",
		bind: text(func(c *Config) *string { return &c.TLSClientCAFile }, "")},
	{Flag: "acl-file", Env: "SW4RM_ACL_FILE", Help: "access-control list, §6.3, docs/acl.md",
		Doc: "access-control list of message types, tools and scopes per agent (§6.3, [docs/acl.md](docs/acl.md)); " +
			"a file that does not load refuses to start",
		DefaultDoc: "empty = no ACL",
		bind:       text(func(c *Config) *string { return &c.ACLFile }, "")},
	{Flag: "repos", Env: "SW4RM_REPOS", Help: "git repositories agents bind worktrees in, repo_id=/path,..., §16, docs/worktrees.md",
		Doc: "git repositories agents bind worktrees in, `repo_id=/absolute/path,…`; a worker refuses to start when one is not a " +
			"git repository or git is missing (§16, [docs/worktrees.md](docs/worktrees.md))",
		DefaultDoc: "empty = no repository",
		bind:       text(func(c *Config) *string { return &c.Repos }, "")},
	{Flag: "worktree-root", Env: "SW4RM_WORKTREE_ROOT",
		Help:       "where worktrees are made, <root>/<repo_id>/<worktree_id>; empty means <repo>/.sw4rm-worktrees",
		Doc:        "where worktrees are made, as `<root>/<repo_id>/<worktree_id>`",
		DefaultDoc: "empty = `<repo>/.sw4rm-worktrees/<worktree_id>`",
		bind:       text(func(c *Config) *string { return &c.WorktreeRoot }, "")},
	{Flag: "mcp-servers", Env: "SW4RM_MCP_SERVERS",
		Help: "MCP servers that run tool calls, id[network=POSTURE]=stdio:command args... ({worktree}: the caller's worktree);id=http://url, docs/tools.md",
		Doc: "MCP servers that are tool providers of kind `mcp`: a server imports their tools at start, every worker runs their calls. " +
			"`id[network=POSTURE]=stdio:command args…;id2=http://url`: no quoting in the command line, `{worktree}` in its arguments " +
			"starts one server per calling worktree, `network` declares the server's posture (undeclared: `FULL_ACCESS`). " +
			"A server that cannot be reached is logged and skipped (§18.1, [docs/tools.md](docs/tools.md))",
		DefaultDoc: "empty = none",
		bind:       text(func(c *Config) *string { return &c.MCPServers }, "")},
	{Flag: "tool-preapproved", Env: "SW4RM_TOOL_PREAPPROVED",
		Help: "tools whose PRIVILEGED and FULL_ACCESS calls need no HITL approval, provider/tool patterns separated by commas, docs/tools.md",
		Doc: "tools whose `PRIVILEGED` and `FULL_ACCESS` calls run without a HITL wait, `provider/tool` patterns separated by commas, " +
			"`*` allowed (§18.5.3, [docs/tools.md](docs/tools.md))",
		DefaultDoc: "empty = none",
		bind:       text(func(c *Config) *string { return &c.ToolPreApproved }, "")},
	{Flag: "tool-approval-timeout", Env: "SW4RM_TOOL_APPROVAL_TIMEOUT",
		Help: "how long a tool call waits for an operator's approval (ELEVATED and above, network FULL_ACCESS) before it is refused, docs/tools.md",
		Doc: "how long a tool call at `privilege_level` `ELEVATED` or above, or with `network_policy` `FULL_ACCESS`, waits in its HITL invocation " +
			"(`TOOL_PRIVILEGE_ESCALATION`, named in the response header `sw4rm-hitl-invocation-id`) for an operator's approval; past it the call " +
			"is refused `PERMISSION_DENIED` (§18.5.3, [docs/tools.md](docs/tools.md))",
		bind: positiveDuration(func(c *Config) *time.Duration { return &c.ToolApprovalTimeout }, 10*time.Minute)},
	{Flag: "tool-egress-allow", Env: "SW4RM_TOOL_EGRESS_ALLOW",
		Help: "hosts process.run may reach under network_policy EGRESS_RESTRICTED, host:port entries separated by commas (*.domain, [v6]:port, host:* allowed), docs/tools.md",
		Doc: "the egress allowlist of the built-in provider: the only targets a `process.run` call under `network_policy` `EGRESS_RESTRICTED` " +
			"reaches, through the provider's proxy; `host:port` entries separated by commas, `*.domain` for the names below a domain, `[v6]:port`, " +
			"`host:*` for any port. A loopback, link-local or own address of the host is reached only when an entry names it as an address " +
			"(§18.5.2, [docs/tools.md](docs/tools.md))",
		DefaultDoc: "empty = `EGRESS_RESTRICTED` calls are refused",
		bind:       text(func(c *Config) *string { return &c.ToolEgressAllow }, "")},
	{Flag: "tool-read-paths", Env: "SW4RM_TOOL_READ_PATHS",
		Help: "paths process.run's processes may read and execute besides the system paths, absolute, separated by commas, docs/tools.md",
		Doc: "paths a `process.run` process may read and execute besides the system paths the sandbox grants (`/usr`, `/lib*`, certificates, …): " +
			"absolute paths separated by commas, e.g. a toolchain in `/opt` or a read-only module cache (§18.4, [docs/tools.md](docs/tools.md))",
		DefaultDoc: "empty = the system paths only",
		bind:       text(func(c *Config) *string { return &c.ToolReadPaths }, "")},
	{Flag: "tool-write-paths", Env: "SW4RM_TOOL_WRITE_PATHS",
		Help: "paths every process.run process may also write, such as a shared build cache, absolute, separated by commas, docs/tools.md",
		Doc: "paths every `process.run` process may write besides its worktree and its private `$TMPDIR`, absolute, separated by commas: a build " +
			"cache shared by the calls (Go's `GOCACHE`). A shared writable path lets one call plant what another reads: leave it empty when agents " +
			"do not trust each other (§18.4, [docs/tools.md](docs/tools.md))",
		DefaultDoc: "empty = none; `sw4rm dev`: the machine's `go env GOCACHE`",
		bind:       text(func(c *Config) *string { return &c.ToolWritePaths }, "")},
	{Flag: "tool-max-procs", Env: "SW4RM_TOOL_MAX_PROCS",
		Help: "the processes and threads of one process.run call (pids cgroup, RLIMIT_NPROC), docs/tools.md",
		Doc:  "the processes and threads of one `process.run` call: a pids cgroup where the server may make one, and `RLIMIT_NPROC`; past it a fork fails and the call is `PERMISSION_DENIED` ([docs/tools.md](docs/tools.md))",
		bind: positiveInt(func(c *Config) *int { return &c.ToolMaxProcs }, sandbox.DefaultProcs)},
	{Flag: "tool-max-file-bytes", Env: "SW4RM_TOOL_MAX_FILE_BYTES",
		Help: "the largest file a process.run process may write, in bytes (RLIMIT_FSIZE), docs/tools.md",
		Doc:  "the largest file a `process.run` process may write, in bytes (`RLIMIT_FSIZE`); past it the process gets `SIGXFSZ` and the call is `PERMISSION_DENIED` ([docs/tools.md](docs/tools.md))",
		bind: positiveInt(func(c *Config) *int { return &c.ToolMaxFileBytes }, sandbox.DefaultFileBytes)},
	{Flag: "tool-max-memory-bytes", Env: "SW4RM_TOOL_MAX_MEMORY_BYTES",
		Help: "the address space of each process.run process, in bytes (RLIMIT_AS), docs/tools.md",
		Doc:  "the address space of each `process.run` process, in bytes (`RLIMIT_AS`: virtual memory, which runtimes reserve generously; below about 2 GiB Go programs cannot start); past it allocation fails and the call is `PERMISSION_DENIED` ([docs/tools.md](docs/tools.md))",
		bind: positiveInt(func(c *Config) *int { return &c.ToolMaxMemoryBytes }, sandbox.DefaultMemoryBytes)},
	{Flag: "tool-max-open-files", Env: "SW4RM_TOOL_MAX_OPEN_FILES",
		Help: "the open files of each process.run process (RLIMIT_NOFILE), docs/tools.md",
		Doc:  "the open files of each `process.run` process (`RLIMIT_NOFILE`); past it `open` fails and the call is `PERMISSION_DENIED` ([docs/tools.md](docs/tools.md))",
		bind: positiveInt(func(c *Config) *int { return &c.ToolMaxOpenFiles }, sandbox.DefaultOpenFiles)},
	{Flag: "log-level", Env: "SW4RM_LOG_LEVEL", Help: "debug, info, warn or error",
		Doc:  "level of the process's log: `debug`, `info`, `warn` or `error`",
		bind: logLevel(func(c *Config) *slog.Level { return &c.LogLevel }, slog.LevelInfo)},
	{Flag: "audit-log", Env: "SW4RM_AUDIT_LOG",
		Help: "file the event stream (audit events, workflow and activity lines) is appended to; empty means none, and the stream goes to stderr",
		Doc: "file the event stream — one line per audited transition and decision (§19), and the Temporal SDK's workflow and activity lines — " +
			"is appended to, with the process's own lines; the terminal then shows the process's lines and only the stream's warnings and errors. " +
			"Empty means no file: the whole stream goes to stderr, as a cluster's log collector expects. The audit rows are in the store either way",
		DefaultDoc: "`" + DevAuditLog + "` for `sw4rm dev`; empty for `sw4rm server` and `sw4rm worker`",
		bind:       text(func(c *Config) *string { return &c.AuditLog }, "")},
	{Flag: "verbose", Env: "SW4RM_VERBOSE", Help: "show the whole event stream on stderr too, not only its warnings and errors",
		Doc:  "show the whole event stream on stderr too, not only its warnings and errors, when `SW4RM_AUDIT_LOG` names a file: `SW4RM_VERBOSE=1 make dev`",
		bind: boolean(func(c *Config) *bool { return &c.Verbose }, false)},
	{Flag: "tracing", Env: "SW4RM_TRACING", Help: "export OpenTelemetry traces over OTLP, configured by the standard OTEL_* variables",
		Doc: "export OpenTelemetry traces of messages, tasks, DAG runs, tool calls and HITL waits over OTLP; the standard `OTEL_*` variables " +
			"(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, …) configure the export; off costs nothing ([docs/observability.md](docs/observability.md))",
		bind: boolean(func(c *Config) *bool { return &c.Tracing }, false)},
}

// Settings returns the settings table.
func Settings() []Setting { return slices.Clone(settings) }

// settingNamed returns how errors name the setting whose variable is env: the variable and the
// flag, e.g. "SW4RM_ROOM_STRATEGY (--room-strategy)".
func settingNamed(env string) string {
	for _, s := range settings {
		if s.Env == env {
			return s.Env + " (--" + s.Flag + ")"
		}
	}
	return env
}

// DefaultConfig returns every setting's default.
func DefaultConfig() Config {
	var c Config
	for _, s := range settings {
		s.bind.reset(&c)
	}
	return c
}

// FromEnv overlays the SW4RM_* environment variables that are set on c. A value that does
// not parse (a malformed number or duration, an unknown authentication mode, …) is an error
// naming the variable; structured values are checked by Resolve.
func (c Config) FromEnv() (Config, error) {
	for _, s := range settings {
		v, ok := os.LookupEnv(s.Env)
		if !ok {
			continue
		}
		if err := s.bind.parse(&c, v); err != nil {
			return c, fmt.Errorf("%s=%q: %w", s.Env, v, err)
		}
	}
	return c, nil
}

// Flags are the process flags, one per setting, and the values they parse into.
type Flags struct {
	set *pflag.FlagSet
	// parsed holds what the command line set, over the defaults.
	parsed Config
}

// NewFlags returns the process flags. Each flag's help names its variable, and its default
// is the setting's.
func NewFlags() *Flags {
	f := &Flags{set: pflag.NewFlagSet("process", pflag.ContinueOnError), parsed: DefaultConfig()}
	for _, s := range settings {
		f.set.Var(flagValue{c: &f.parsed, b: s.bind}, s.Flag, s.Help+" ("+s.Env+")")
		if s.bind.kind() == "bool" {
			f.set.Lookup(s.Flag).NoOptDefVal = "true" // --verbose, not --verbose=true
		}
	}
	return f
}

// FlagSet returns the flags, for a command to add to its own.
func (f *Flags) FlagSet() *pflag.FlagSet { return f.set }

// Config returns the configuration once the command line is parsed: each setting's default,
// under its variable when that is set, under its flag when the command line set it. It starts
// from the environment, so a setting given by variable alone is never lost.
func (f *Flags) Config() (Config, error) {
	c, err := DefaultConfig().FromEnv()
	if err != nil {
		return c, err
	}
	for _, s := range settings {
		if f.set.Changed(s.Flag) {
			s.bind.copy(&c, &f.parsed)
		}
	}
	return c, nil
}

// flagValue is a setting's flag: it parses into its field of c exactly as the variable does.
type flagValue struct {
	c *Config
	b binding
}

func (v flagValue) String() string { return v.b.format(v.c) }

func (v flagValue) Set(s string) error { return v.b.parse(v.c, s) }

func (v flagValue) Type() string { return v.b.kind() }

// SettingsMarkdown is the table of README.md's "Configuration" section: every setting's
// variable, flag, default and meaning. `sw4rm settings --markdown` prints it.
func SettingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	defaults := DefaultConfig()
	for _, s := range settings {
		def := s.DefaultDoc
		if def == "" {
			def = defaultText(s, &defaults)
		}
		doc := s.Doc
		if doc == "" {
			doc = s.Help
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s |\n", s.Env, s.Flag, cell(def), cell(doc))
	}
	return b.String()
}

// defaultText is a setting's default as README.md shows it: quoted, durations in their
// shortest form ("1h", not "1h0m0s"), "empty" for the empty string.
func defaultText(s Setting, c *Config) string {
	v := s.bind.format(c)
	if v == "" {
		return "empty"
	}
	if d, err := time.ParseDuration(v); err == nil && s.bind.kind() == "duration" {
		v = shortDuration(d)
	}
	return "`" + v + "`"
}

// shortDuration writes d without its zero minutes and seconds: 1h, 10m, 168h, 90s.
func shortDuration(d time.Duration) string {
	v := d.String()
	if strings.HasSuffix(v, "m0s") {
		v = strings.TrimSuffix(v, "0s")
	}
	if strings.HasSuffix(v, "h0m") {
		v = strings.TrimSuffix(v, "0m")
	}
	return v
}

// cell escapes a table cell's pipes, which would end the cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
