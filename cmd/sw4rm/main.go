// Command sw4rm is the SW4RM server on Temporal: `sw4rm server` runs the gRPC frontend,
// `sw4rm worker` the Temporal worker, and `sw4rm dev` both in one process for a laptop.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/app"
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
		Version:       versionText(debug.ReadBuildInfo()),
	}
	root.SetVersionTemplate("{{.Version}}")
	// The process flags come from app's settings table, one per setting: a flag on the
	// command line wins over its variable, which wins over the default.
	flags := app.NewFlags()
	run := func(roles app.Roles) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			c, err := flags.Config()
			if err != nil {
				return err
			}
			if roles.Server && roles.Worker {
				c = devAuditLog(cmd, c)
			}
			log, closeLog, err := app.NewLogger(c, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer func() { _ = closeLog() }()
			if c.AuditLog != "" && !c.Verbose {
				log.Info("audit log: the event stream (audit events, workflow and activity lines) goes to this file, its warnings and errors here too; "+
					"--verbose or SW4RM_VERBOSE=1 shows it all here", "file", c.AuditLog)
			}
			if roles.Server && roles.Worker {
				c = devDefaults(cmd, c, log)
				c = devToolWritePaths(cmd, c)
			}
			return serveUntilSignalled(start, c, roles, log)
		}
	}
	serverCmds := []*cobra.Command{
		{Use: "server", Short: "Run the gRPC frontend (every SW4RM service on one port)", Args: cobra.NoArgs, RunE: run(app.Roles{Server: true})},
		{Use: "worker", Short: "Run a Temporal worker hosting every SW4RM workflow and activity", Args: cobra.NoArgs, RunE: run(app.Roles{Worker: true})},
		{Use: "dev", Short: "Run server and worker in one process (memory store unless SW4RM_DATABASE_URL is set)", Args: cobra.NoArgs, RunE: run(app.Roles{Server: true, Worker: true})},
	}
	for _, c := range serverCmds {
		// The process flags belong to the process commands, not to the operator commands.
		c.Flags().AddFlagSet(flags.FlagSet())
	}
	root.AddCommand(serverCmds...)
	root.AddCommand(newHitlCmd())
	root.AddCommand(newDLQCmd())
	root.AddCommand(newAuditCmd())
	root.AddCommand(newKeysCmd())
	root.AddCommand(newDAGCmd())
	root.AddCommand(newAgentsCmd(), newTasksCmd(), newToolsCmd())
	root.AddCommand(newNegotiationCmd())
	root.AddCommand(newSearchAttributesCmd())
	root.AddCommand(newSettingsCmd())
	root.AddCommand(newTracesCmd())
	root.AddCommand(newLoadgenCmd())
	return root
}

// serveUntilSignalled starts the roles and runs them until SIGINT or SIGTERM, then stops them.
func serveUntilSignalled(start startFunc, c app.Config, roles app.Roles, log *slog.Logger) error {
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

// devAuditLog gives `sw4rm dev` its audit log file, app.DevAuditLog, unless SW4RM_AUDIT_LOG
// or --audit-log is set (even to empty, which puts the event stream on stderr): a laptop's
// terminal shows the banner, warnings and errors, not hundreds of audit lines per example.
func devAuditLog(cmd *cobra.Command, c app.Config) app.Config {
	if _, inEnv := os.LookupEnv("SW4RM_AUDIT_LOG"); inEnv || cmd.Flags().Changed("audit-log") {
		return c
	}
	c.AuditLog = app.DevAuditLog
	return c
}

// devToolWritePaths lets `sw4rm dev`'s process.run calls share the machine's Go build cache
// (`go env GOCACHE`), unless SW4RM_TOOL_WRITE_PATHS or --tool-write-paths is set (even to
// empty): without it every call in a new worktree compiles the standard library again,
// which takes most of a minute. On a laptop the agents are the developer's own; a shared
// deployment leaves the setting empty (docs/tools.md).
func devToolWritePaths(cmd *cobra.Command, c app.Config) app.Config {
	if _, inEnv := os.LookupEnv("SW4RM_TOOL_WRITE_PATHS"); inEnv || cmd.Flags().Changed("tool-write-paths") {
		return c
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if cache := strings.TrimSpace(string(out)); err == nil && filepath.IsAbs(cache) {
		c.ToolWritePaths = cache
	}
	return c
}

// devDefaults gives `sw4rm dev` what a laptop needs and says so: with no HITL operator and no
// external HITL component configured, every HITL wait would get its fallback at once (§15.3),
// so the dev role configures app.DevHITLOperators — what `make dev` configured before. An
// operator list set on purpose, even to empty, is kept. The default operator's token is left
// for the CLI on this machine (devtoken.go).
func devDefaults(cmd *cobra.Command, c app.Config, log *slog.Logger) app.Config {
	_, inEnv := os.LookupEnv("SW4RM_HITL_OPERATORS")
	if inEnv || cmd.Flags().Changed("hitl-operators") || c.HITLOperators != "" || c.HITLExternal != "" {
		forgetDevToken(log)
		return c
	}
	c.HITLOperators = app.DevHITLOperators
	name, token, _ := strings.Cut(app.DevHITLOperators, "=")
	saveDevToken(token, log)
	log.Info("dev role: one HITL operator configured by default, so that HITL waits can be decided (sw4rm hitl decide, docs/hitl.md); "+
		"set SW4RM_HITL_OPERATORS to choose operators, or to empty for none", "operator", name, "token", token)
	return c
}
