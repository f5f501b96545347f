package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	pats, err := loadgen.ParsePatterns(*patterns)
	if err != nil {
		return err
	}
	complete()
	token, err := soakOperator(o)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, *o)
	if err != nil {
		return err
	}
	defer c.Stop()
	var faults []soak.Fault
	if *spacing > 0 {
		names := soak.DefaultProcs(c)
		if *procs != "" {
			names = strings.Split(*procs, ",")
		}
		faults = soak.Schedule(*duration, *spacing, *cycle, *quiet, *down, names...)
	}
	res, err := soak.Run(ctx, c, soak.Config{
		Load:   loadgen.Config{Duration: *duration, Drain: *drain, Interval: *interval, Patterns: pats, OperatorToken: token},
		Faults: faults, FlatTolerance: *tol,
	}, os.Stdout)
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	lost, doubled, stranded := res.Summary.Final.Failures()
	fmt.Printf("soak: %s of load, %d faults, %d operations completed: %d lost, %d doubled, %d stranded; flat: %v\n",
		*duration, len(res.Faults), res.Summary.Final.Completed(), lost, doubled, stranded, res.Flat)
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
