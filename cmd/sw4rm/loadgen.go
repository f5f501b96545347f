package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// newLoadgenCmd builds `sw4rm loadgen`: the load generator (package loadgen) against any
// deployment, printing its figures every interval and at the end, optionally the final
// summary as JSON, and exiting 1 when anything was lost, doubled or stranded.
func newLoadgenCmd() *cobra.Command {
	var (
		cfg      loadgen.Config
		patterns string
		metrics  string
		asJSON   bool
		flatTol  float64
	)
	cmd := &cobra.Command{
		Use:   "loadgen [flags]",
		Short: "Drive a mixed swarm against a deployment and account for every operation",
		Long: "Register a few agents and drive messages, preempting tasks, DAG runs, handoffs, negotiations, " +
			"tool calls and HITL approvals through the public gRPC API for --duration, then wait up to --drain " +
			"for what was started and report, per pattern, what completed, failed, was refused, lost, doubled or " +
			"stranded. Figures are printed every --interval. The server should run with SW4RM_AUTH=optional or off; " +
			"the hitl pattern needs an operator token (SW4RM_HITL_OPERATORS). Patterns: " +
			strings.Join(patternNames(), ", ") + "; --patterns takes name[=rate[/concurrency]],... or all. " +
			"Exit status 1 when anything was lost, doubled or stranded.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadgen.ParsePatterns(patterns)
			if err != nil {
				return err
			}
			cfg.Patterns = p
			if _, ok := p[loadgen.HITL]; ok && cfg.OperatorToken == "" {
				cfg.OperatorToken = devToken(cfg.Addr)
			}
			if metrics != "" {
				cfg.MetricsURLs = strings.Split(metrics, ",")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			if asJSON {
				// The figures go to stderr, the summary alone to stdout.
				out = cmd.ErrOrStderr()
			}
			sum, runErr := loadgen.Run(ctx, cfg, out)
			flat, why := loadgen.Flat(sum, flatTol)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					loadgen.Summary
					Flat    bool     `json:"flat"`
					FlatWhy []string `json:"flat_why,omitempty"`
				}{sum, flat, why}); err != nil {
					return err
				}
			} else if len(why) > 0 {
				fmt.Fprintf(out, "not flat: %s\n", strings.Join(why, "; "))
			}
			if runErr != nil && ctx.Err() == nil {
				return runErr
			}
			if lost, doubled, stranded := sum.Final.Failures(); lost+doubled+stranded > 0 {
				return fmt.Errorf("lost=%d doubled=%d stranded=%d", lost, doubled, stranded)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", envOr("SW4RM_SERVER", "localhost:50051"), "sw4rm gRPC address (SW4RM_SERVER)")
	f.DurationVar(&cfg.Duration, "duration", 0, "load phase (default 1m)")
	f.DurationVar(&cfg.Drain, "drain", 0, "longest wait for the operations started once the load phase is over (default 1m)")
	f.DurationVar(&cfg.Interval, "interval", 0, "how often figures are printed (default 1m)")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", 0, "bound on one operation, retries included (default 2m)")
	f.StringVar(&patterns, "patterns", "all", "patterns and their load: name[=rate[/concurrency]],... or all")
	f.IntVar(&cfg.Fan, "fan", 0, "fan-out of the DAG runs (default 3)")
	f.StringVar(&metrics, "metrics-urls", "", "comma-separated /metrics URLs of sw4rm processes to scrape")
	f.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL URL of the sw4rm store, to report its growth")
	f.StringVar(&cfg.TemporalDatabaseURL, "temporal-database-url", "", "PostgreSQL URL of Temporal's persistence, to report history growth")
	f.StringVar(&cfg.OperatorToken, "operator-token", os.Getenv("SW4RM_OPERATOR_TOKEN"),
		"HITL operator token for the hitl pattern (SW4RM_OPERATOR_TOKEN); a server on loopback gets the one sw4rm dev left")
	f.StringVar(&cfg.AgentPrefix, "agent-prefix", "", "prefix of the agents' ids (default loadgen-<random>)")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout (the figures go to stderr)")
	f.Float64Var(&flatTol, "flat-tolerance", 0.5, "growth tolerated by the flatness judgement (0.5 = 50 %)")
	return cmd
}

func patternNames() []string {
	s := make([]string, len(loadgen.AllPatterns))
	for i, p := range loadgen.AllPatterns {
		s[i] = string(p)
	}
	return s
}
