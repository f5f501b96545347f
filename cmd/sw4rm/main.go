// Command sw4rm is the SW4RM server on Temporal: `sw4rm server` runs the gRPC frontend,
// `sw4rm worker` the Temporal worker, and `sw4rm dev` both in one process for a laptop.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/tools/builtin"
)

func main() {
	// A process.run call's init is this executable (tools/builtin): it runs the call's
	// program and exits here, before anything else.
	builtin.RunInitIfAsked()
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sw4rm:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command { return newRootWith(app.Start) }

// startFunc starts a process's roles: app.Start, or a stand-in in tests.
type startFunc func(ctx context.Context, cfg app.Config, roles app.Roles, log *slog.Logger) (*app.App, error)

// newRootWith builds the command line; the process commands start their roles with start.
func newRootWith(start startFunc) *cobra.Command {
	root := &cobra.Command{
		Use:           "sw4rm",
		Short:         "SW4RM: interruptible, message-driven agent coordination on Temporal",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cfg := app.DefaultConfig()
	var logLevel string
	pf := pflag.NewFlagSet("process", pflag.ContinueOnError)
	pf.StringVar(&cfg.TemporalAddress, "temporal-address", cfg.TemporalAddress, "Temporal frontend host:port (SW4RM_TEMPORAL_ADDRESS)")
	pf.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Temporal namespace (SW4RM_NAMESPACE)")
	pf.StringVar(&cfg.TaskQueue, "task-queue", cfg.TaskQueue, "Temporal task queue (SW4RM_TASK_QUEUE)")
	pf.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address (SW4RM_GRPC_ADDR)")
	pf.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address for /healthz; empty disables (SW4RM_HTTP_ADDR)")
	pf.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "PostgreSQL URL; empty uses the in-memory store (SW4RM_DATABASE_URL)")
	pf.IntVar(&cfg.BufferCapacity, "buffer-capacity", cfg.BufferCapacity, "inbound buffer capacity per agent, §13 (SW4RM_BUFFER_CAPACITY)")
	pf.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", cfg.MaxPayloadBytes, "largest payload admitted, §5.4 (SW4RM_MAX_PAYLOAD_BYTES)")
	pf.DurationVar(&cfg.AgentInitTimeout, "agent-init-timeout", cfg.AgentInitTimeout, "INITIALIZING timeout, §8.3 (SW4RM_AGENT_INIT_TIMEOUT)")
	pf.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "how often each agent is heartbeated, §14 (SW4RM_HEARTBEAT_INTERVAL)")
	pf.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", cfg.HeartbeatMisses, "missed heartbeat intervals before an agent is marked unavailable, §14 (SW4RM_HEARTBEAT_MISSES)")
	pf.DurationVar(&cfg.DeliveryLease, "delivery-lease", cfg.DeliveryLease, "redelivery lease of unconfirmed stream rows (SW4RM_DELIVERY_LEASE)")
	pf.StringVar(&cfg.HITLOperators, "hitl-operators", "", "HITL operators, name=token[:REASON|REASON],... (SW4RM_HITL_OPERATORS)")
	pf.DurationVar(&cfg.HITLTimeout, "hitl-timeout", cfg.HITLTimeout, "deadline of invocations raised by HitlService.Decide (SW4RM_HITL_TIMEOUT)")
	pf.StringVar(&cfg.HITLExternal, "hitl-external", "", "address of an external HITL component (SW4RM_HITL_EXTERNAL)")
	pf.StringVar(&cfg.HITLOperatorKeys, "hitl-operator-keys", "", "operators' own Ed25519 public keys for signed raw decisions, name=<base64>,... (SW4RM_HITL_OPERATOR_KEYS)")
	pf.StringVar(&cfg.HITLDecisionKeyFile, "hitl-decision-key-file", "", "file holding the HITL decision key (Ed25519 seed), the same on every server and worker (SW4RM_HITL_DECISION_KEY_FILE)")
	pf.DurationVar(&cfg.AckTimeout, "ack-timeout", cfg.AckTimeout, "SENT → TIMED_OUT timeout, §11 (SW4RM_ACK_TIMEOUT)")
	pf.IntVar(&cfg.MaxRetries, "max-retries", cfg.MaxRetries, "retry budget before the dead-letter queue, §21.1 (SW4RM_MAX_RETRIES)")
	pf.DurationVar(&cfg.DedupWindow, "dedup-window", cfg.DedupWindow, "idempotency window, §11.2 (SW4RM_DEDUP_WINDOW)")
	pf.DurationVar(&cfg.StreamRetention, "stream-retention", cfg.StreamRetention, "how long confirmed rows stay resumable, §5.5 (SW4RM_STREAM_RETENTION)")
	pf.DurationVar(&cfg.DLQRetention, "dlq-retention", cfg.DLQRetention, "dead-letter retention, §21.1 (SW4RM_DLQ_RETENTION)")
	pf.Float64Var(&cfg.PrivilegedRate, "privileged-rate", cfg.PrivilegedRate, "PRIVILEGED messages/s per producer before overflow to STANDARD, §7.3 (SW4RM_PRIVILEGED_RATE)")
	pf.IntVar(&cfg.PrivilegedBurst, "privileged-burst", cfg.PrivilegedBurst, "PRIVILEGED burst per producer (SW4RM_PRIVILEGED_BURST)")
	pf.DurationVar(&cfg.RoomTimeout, "room-timeout", cfg.RoomTimeout, "negotiation room wait for votes, §17.5 (SW4RM_ROOM_TIMEOUT)")
	pf.StringVar(&cfg.RoomStrategy, "room-strategy", cfg.RoomStrategy, "vote aggregation: confidence_weighted, simple_average, majority_vote, borda_count (SW4RM_ROOM_STRATEGY)")
	pf.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate of the gRPC and HTTP ports; with --tls-key-file turns on TLS, reloaded when the file changes (SW4RM_TLS_CERT_FILE)")
	pf.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file (SW4RM_TLS_KEY_FILE)")
	pf.StringVar(&cfg.TLSClientCAFile, "tls-client-ca-file", "", "PEM CA bundle; clients must present a certificate it verifies (mutual TLS) (SW4RM_TLS_CLIENT_CA_FILE)")
	pf.StringVar(&cfg.ACLFile, "acl-file", "", "access-control list, §6.3, docs/acl.md (SW4RM_ACL_FILE)")
	pf.StringVar(&cfg.ReasoningExternal, "reasoning-external", "", "address of an external reasoning engine (a ReasoningProxy) for EvaluateDebate and Summarize; empty uses the builtin one (SW4RM_REASONING_EXTERNAL)")
	pf.StringVar(&cfg.Repos, "repos", "", "git repositories agents bind worktrees in, repo_id=/path,..., §16, docs/worktrees.md (SW4RM_REPOS)")
	pf.StringVar(&cfg.WorktreeRoot, "worktree-root", "", "where worktrees are made, <root>/<repo_id>/<worktree_id>; empty means <repo>/.sw4rm-worktrees (SW4RM_WORKTREE_ROOT)")
	pf.StringVar(&cfg.MCPServers, "mcp-servers", "", "MCP servers that run tool calls, id[network=POSTURE]=stdio:command args... ({worktree}: the caller's worktree);id=http://url, docs/tools.md (SW4RM_MCP_SERVERS)")
	pf.StringVar(&cfg.ToolPreApproved, "tool-preapproved", "", "tools whose PRIVILEGED and FULL_ACCESS calls need no HITL approval, provider/tool patterns separated by commas, docs/tools.md (SW4RM_TOOL_PREAPPROVED)")
	authMode := pf.String("auth", "off", "authentication: off, optional or required, §6.2, docs/security.md (SW4RM_AUTH)")
	pf.DurationVar(&cfg.AuthClockSkew, "auth-clock-skew", cfg.AuthClockSkew, "largest clock difference of a signed call (SW4RM_AUTH_CLOCK_SKEW)")
	pf.DurationVar(&cfg.KeyOverlap, "key-overlap", cfg.KeyOverlap, "how long a rotated-out agent key stays valid, §23 (SW4RM_KEY_OVERLAP)")
	laneWeights := pf.String("lane-weights", "6,3,1", "PRIVILEGED,STANDARD,BULK delivery weights (SW4RM_LANE_WEIGHTS)")
	pf.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error (SW4RM_LOG_LEVEL)")

	// resolve applies the environment under explicitly set flags: a flag on the command line
	// wins over its variable, which wins over the default. It starts from the environment, so
	// a setting that has a variable but no flag (SW4RM_MAX_PARALLEL, SW4RM_PREEMPT_TIMEOUT, …)
	// is never lost, and lays the flags that were set on top.
	resolve := func(cmd *cobra.Command) (app.Config, *slog.Logger, error) {
		fromEnv, err := app.DefaultConfig().FromEnv()
		if err != nil {
			return cfg, nil, err
		}
		merged := fromEnv
		apply := func(flag string, set func()) {
			if cmd.Flags().Changed(flag) {
				set()
			}
		}
		apply("temporal-address", func() { merged.TemporalAddress = cfg.TemporalAddress })
		apply("namespace", func() { merged.Namespace = cfg.Namespace })
		apply("task-queue", func() { merged.TaskQueue = cfg.TaskQueue })
		apply("grpc-addr", func() { merged.GRPCAddr = cfg.GRPCAddr })
		apply("http-addr", func() { merged.HTTPAddr = cfg.HTTPAddr })
		apply("database-url", func() { merged.DatabaseURL = cfg.DatabaseURL })
		apply("buffer-capacity", func() { merged.BufferCapacity = cfg.BufferCapacity })
		apply("max-payload-bytes", func() { merged.MaxPayloadBytes = cfg.MaxPayloadBytes })
		apply("agent-init-timeout", func() { merged.AgentInitTimeout = cfg.AgentInitTimeout })
		apply("heartbeat-interval", func() { merged.HeartbeatInterval = cfg.HeartbeatInterval })
		apply("heartbeat-misses", func() { merged.HeartbeatMisses = cfg.HeartbeatMisses })
		apply("delivery-lease", func() { merged.DeliveryLease = cfg.DeliveryLease })
		apply("hitl-operators", func() { merged.HITLOperators = cfg.HITLOperators })
		apply("ack-timeout", func() { merged.AckTimeout = cfg.AckTimeout })
		apply("max-retries", func() { merged.MaxRetries = cfg.MaxRetries })
		apply("dedup-window", func() { merged.DedupWindow = cfg.DedupWindow })
		apply("stream-retention", func() { merged.StreamRetention = cfg.StreamRetention })
		apply("dlq-retention", func() { merged.DLQRetention = cfg.DLQRetention })
		apply("privileged-rate", func() { merged.PrivilegedRate = cfg.PrivilegedRate })
		apply("privileged-burst", func() { merged.PrivilegedBurst = cfg.PrivilegedBurst })
		apply("room-timeout", func() { merged.RoomTimeout = cfg.RoomTimeout })
		apply("room-strategy", func() { merged.RoomStrategy = cfg.RoomStrategy })
		if cmd.Flags().Changed("lane-weights") {
			w, err := app.ParseLaneWeights(*laneWeights)
			if err != nil {
				return merged, nil, fmt.Errorf("--lane-weights: %w", err)
			}
			merged.LaneWeights = w
		}
		apply("hitl-timeout", func() { merged.HITLTimeout = cfg.HITLTimeout })
		apply("hitl-external", func() { merged.HITLExternal = cfg.HITLExternal })
		apply("hitl-operator-keys", func() { merged.HITLOperatorKeys = cfg.HITLOperatorKeys })
		apply("hitl-decision-key-file", func() { merged.HITLDecisionKeyFile = cfg.HITLDecisionKeyFile })
		apply("tls-cert-file", func() { merged.TLSCertFile = cfg.TLSCertFile })
		apply("tls-key-file", func() { merged.TLSKeyFile = cfg.TLSKeyFile })
		apply("tls-client-ca-file", func() { merged.TLSClientCAFile = cfg.TLSClientCAFile })
		apply("acl-file", func() { merged.ACLFile = cfg.ACLFile })
		apply("reasoning-external", func() { merged.ReasoningExternal = cfg.ReasoningExternal })
		apply("repos", func() { merged.Repos = cfg.Repos })
		apply("worktree-root", func() { merged.WorktreeRoot = cfg.WorktreeRoot })
		apply("mcp-servers", func() { merged.MCPServers = cfg.MCPServers })
		apply("tool-preapproved", func() { merged.ToolPreApproved = cfg.ToolPreApproved })
		apply("auth-clock-skew", func() { merged.AuthClockSkew = cfg.AuthClockSkew })
		apply("key-overlap", func() { merged.KeyOverlap = cfg.KeyOverlap })
		if cmd.Flags().Changed("auth") {
			m, err := auth.ParseMode(*authMode)
			if err != nil {
				return merged, nil, fmt.Errorf("--auth: %w", err)
			}
			merged.Auth = m
		}
		level := logLevel
		if v, ok := os.LookupEnv("SW4RM_LOG_LEVEL"); ok && !cmd.Flags().Changed("log-level") {
			level = v
		}
		var lvl slog.Level
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return merged, nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
		return merged, log, nil
	}

	run := func(roles app.Roles) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			c, log, err := resolve(cmd)
			if err != nil {
				return err
			}
			if roles.Server && roles.Worker {
				c = devDefaults(cmd, c, log)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := start(ctx, c, roles, log)
			if err != nil {
				return err
			}
			if roles.Server {
				log.Info("ready", "grpc", a.GRPCAddr(), "healthz", a.HTTPScheme()+"://"+a.HTTPAddr()+"/healthz")
			}
			<-ctx.Done()
			log.Info("shutting down")
			a.Stop()
			return nil
		}
	}
	serverCmds := []*cobra.Command{
		{Use: "server", Short: "Run the gRPC frontend (every SW4RM service on one port)", Args: cobra.NoArgs, RunE: run(app.Roles{Server: true})},
		{Use: "worker", Short: "Run a Temporal worker hosting every SW4RM workflow and activity", Args: cobra.NoArgs, RunE: run(app.Roles{Worker: true})},
		{Use: "dev", Short: "Run server and worker in one process (memory store unless SW4RM_DATABASE_URL is set)", Args: cobra.NoArgs, RunE: run(app.Roles{Server: true, Worker: true})},
	}
	for _, c := range serverCmds {
		// The process flags belong to the process commands, not to the operator commands.
		c.Flags().AddFlagSet(pf)
	}
	root.AddCommand(serverCmds...)
	root.AddCommand(newHitlCmd())
	root.AddCommand(newDLQCmd())
	root.AddCommand(newKeysCmd())
	root.AddCommand(newDAGCmd())
	root.AddCommand(newNegotiationCmd())
	root.AddCommand(newSearchAttributesCmd())
	return root
}

// devDefaults gives `sw4rm dev` what a laptop needs and says so: with no HITL operator and no
// external HITL component configured, every HITL wait would get its fallback at once (§15.3),
// so the dev role configures app.DevHITLOperators — what `make dev` configured before. An
// operator list set on purpose, even to empty, is kept.
func devDefaults(cmd *cobra.Command, c app.Config, log *slog.Logger) app.Config {
	_, inEnv := os.LookupEnv("SW4RM_HITL_OPERATORS")
	if inEnv || cmd.Flags().Changed("hitl-operators") || c.HITLOperators != "" || c.HITLExternal != "" {
		return c
	}
	c.HITLOperators = app.DevHITLOperators
	name, token, _ := strings.Cut(app.DevHITLOperators, "=")
	log.Info("dev role: one HITL operator configured by default, so that HITL waits can be decided (sw4rm hitl decide, docs/hitl.md); "+
		"set SW4RM_HITL_OPERATORS to choose operators, or to empty for none", "operator", name, "token", token)
	return c
}
