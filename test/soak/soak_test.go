// Package soak_test runs the soak's CI profile (docs/reliability.md, "The soak"): the mixed
// load of package loadgen against the cluster kit — Temporal on a PostgreSQL of the test's
// own, two sw4rm servers behind the kit's load balancer, three workers — for three minutes,
// while a server and a worker are killed with kill -9, Temporal is killed and restarted and
// PostgreSQL crashes and recovers. It fails on anything lost, doubled or stranded — but for
// the open defect of preempting tasks across crashes, which it reports (reliability.md,
// "The soak") — on a pattern that completed nothing, and on memory or history per operation
// that did not stay flat. SW4RM_SOAK_DURATION lengthens the load (the one-hour figures of reliability.md come
// from `make soak`, which runs the same profile through sw4rm-cluster).
package soak_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/clustertest"
	"github.com/sw4rm/sw4rm-temporal/cluster/soak"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

func TestSoak(t *testing.T) {
	server, sqlTool := clustertest.NeedTools(t)
	duration := 3 * time.Minute
	if v := os.Getenv("SW4RM_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("SW4RM_SOAK_DURATION=%q: want a duration of at least 1m", v)
		}
		duration = d
	}
	state := clustertest.StateDir(t, "sw4rm-soak-test-")
	bin := clustertest.Build(t, state, "sw4rm", "")
	token, env := clustertest.Operator(t, state, "soak")

	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		StateDir: filepath.Join(state, "cluster"), TemporalServer: server, SQLTool: sqlTool, SW4RM: bin,
		Env:  append(env, "SW4RM_LOG_LEVEL=info"),
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer c.Stop()

	faults := soak.Schedule(duration, 25*time.Second, 0, time.Minute, 3*time.Second, soak.DefaultProcs(c)...)
	res, err := soak.Run(ctx, c, soak.Config{
		Load: loadgen.Config{
			Duration: duration, Drain: 2 * time.Minute, Interval: time.Minute,
			OperatorToken: token, Logf: t.Logf,
		},
		Faults: faults,
	}, os.Stdout)
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	if len(res.Faults) != len(faults) {
		t.Errorf("%d of %d faults injected", len(res.Faults), len(faults))
	}
	problems := res.Problems()
	// Known defect, open (docs/reliability.md, "The soak"): across Temporal and PostgreSQL
	// crashes a preempting task is now and then run to completion twice, or lost, about once
	// per six rounds of faults in the one-hour run. This profile reports it and fails on
	// every other pattern; `make soak` (sw4rm-cluster soak) fails on it too.
	if tasks, ok := res.Summary.Final.Pattern(loadgen.Tasks); ok && tasks.Lost+tasks.Doubled > 0 && tasks.Stranded == 0 {
		if lost, doubled, stranded := res.Summary.Final.Failures(); lost == tasks.Lost && doubled == tasks.Doubled && stranded == 0 {
			t.Logf("KNOWN DEFECT (docs/reliability.md, \"The soak\"): tasks %d lost, %d doubled", tasks.Lost, tasks.Doubled)
			problems = slices.DeleteFunc(problems, func(p string) bool { return strings.HasSuffix(p, " stranded") })
		}
	}
	if len(problems) > 0 {
		t.Errorf("soak failed:\n  %s", strings.Join(problems, "\n  "))
	}
	lost, doubled, stranded := res.Summary.Final.Failures()
	t.Logf("soak: %s of load, %d faults, %d operations completed: %d lost, %d doubled, %d stranded; flat: %v",
		duration, len(res.Faults), res.Summary.Final.Completed(), lost, doubled, stranded, res.Flat)
}
