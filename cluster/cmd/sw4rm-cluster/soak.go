package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/soak"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// soakCmd starts a cluster (with a PostgreSQL of its own by default, so that it can crash
// it), runs the soak against it and exits 1 when the soak found a problem
// (docs/reliability.md, "The soak").
func soakCmd(args []string) error {
	fs := flag.NewFlagSet("sw4rm-cluster soak", flag.ContinueOnError)
	o, complete := clusterFlags(fs, true)
	var (
		duration = fs.Duration("duration", 3*time.Minute, "load phase")
		drain    = fs.Duration("drain", 2*time.Minute, "longest wait, after the load, for what was started to finish")
		interval = fs.Duration("interval", time.Minute, "how often the figures are printed")
		patterns = fs.String("patterns", "all", "patterns and their load, name[=rate[/concurrency]],… (sw4rm loadgen --help)")
		spacing  = fs.Duration("fault-spacing", 25*time.Second, "time between two faults of a round (0: no faults)")
		cycle    = fs.Duration("fault-cycle", 0, "a new round of faults every this long (0: one round)")
		down     = fs.Duration("fault-down", 3*time.Second, "how long a killed process stays down")
		quiet    = fs.Duration("quiet", time.Minute, "the last stretch of the load, without faults")
		procs    = fs.String("fault-procs", "", "processes killed in a round, in order (default: server-1,worker-2,temporal, and postgres when it is the cluster's own)")
		tol      = fs.Float64("flat-tolerance", 0.5, "growth allowed of memory and history per operation between the first minute and the end")
		jsonOut  = fs.String("json", "", "also write the summary, faults and judgement as JSON to this file")
	)
	var (
		pats  map[loadgen.Pattern]loadgen.PatternConfig
		token string
	)
	prepare := func() (err error) {
		if pats, err = loadgen.ParsePatterns(*patterns); err != nil {
			return err
		}
		token, err = soakOperator(o)
		return err
	}
	return start(fs, args, complete, func(ctx context.Context, c *cluster.Cluster) error {
		return soakOn(ctx, c, soakRun{duration: *duration, drain: *drain, interval: *interval, spacing: *spacing, cycle: *cycle,
			down: *down, quiet: *quiet, procs: *procs, tol: *tol, jsonOut: *jsonOut, pats: pats, token: token})
	}, prepare, o)
}

// soakRun is what the soak subcommand's flags ask for.
type soakRun struct {
	duration, drain, interval, spacing, cycle, down, quiet time.Duration
	procs, jsonOut, token                                  string
	tol                                                    float64
	pats                                                   map[loadgen.Pattern]loadgen.PatternConfig
}

// soakOn runs the soak on the started cluster c, writes its JSON when asked and turns its
// problems into the command's error.
func soakOn(ctx context.Context, c *cluster.Cluster, r soakRun) error {
	var faults []soak.Fault
	if r.spacing > 0 {
		names := soak.DefaultProcs(c)
		if r.procs != "" {
			names = strings.Split(r.procs, ",")
		}
		faults = soak.Schedule(r.duration, r.spacing, r.cycle, r.quiet, r.down, names...)
	}
	res, err := soak.Run(ctx, c, soak.Config{
		Load:   loadgen.Config{Duration: r.duration, Drain: r.drain, Interval: r.interval, Patterns: r.pats, OperatorToken: r.token},
		Faults: faults, FlatTolerance: r.tol,
	}, os.Stdout)
	if err != nil {
		return err
	}
	if r.jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(r.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	lost, doubled, stranded := res.Summary.Final.Failures()
	fmt.Printf("soak: %s of load, %d faults, %d operations completed: %d lost, %d doubled, %d stranded; flat: %v\n",
		r.duration, len(res.Faults), res.Summary.Final.Completed(), lost, doubled, stranded, res.Flat)
	if problems := res.Problems(); len(problems) > 0 {
		return fmt.Errorf("soak failed:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// soakOperator gives the soak's HITL pattern an operator and the servers a decision key
// (docs/hitl.md), unless the environment already configured them, and lets the load
// generator's agents register unsigned (SW4RM_AUTH=optional) unless SW4RM_AUTH is set.
// It returns the operator's token (SW4RM_OPERATOR_TOKEN when the environment names the
// operators).
func soakOperator(o *cluster.Options) (string, error) {
	has := func(name string) bool {
		for _, kv := range o.Env {
			if strings.HasPrefix(kv, name+"=") {
				return true
			}
		}
		return false
	}
	if !has("SW4RM_AUTH") {
		o.Env = append(o.Env, "SW4RM_AUTH=optional")
	}
	if has("SW4RM_HITL_OPERATORS") {
		return os.Getenv("SW4RM_OPERATOR_TOKEN"), nil
	}
	seed, tok := make([]byte, 32), make([]byte, 16)
	if _, err := rand.Read(seed); err != nil {
		return "", err
	}
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return "", err
	}
	keyFile, err := filepath.Abs(filepath.Join(o.StateDir, "hitl-decision.key"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(seed)), 0o600); err != nil {
		return "", err
	}
	token := hex.EncodeToString(tok)
	o.Env = append(o.Env, "SW4RM_HITL_OPERATORS=soak="+token)
	if !has("SW4RM_HITL_DECISION_KEY_FILE") {
		o.Env = append(o.Env, "SW4RM_HITL_DECISION_KEY_FILE="+keyFile)
	}
	return token, nil
}
