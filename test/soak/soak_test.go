// Package soak_test runs the soak's CI profile (docs/reliability.md, "The soak"): the mixed
// load of package loadgen against the cluster kit — Temporal on a PostgreSQL of the test's
// own, two sw4rm servers behind the kit's load balancer, three workers — for three minutes,
// while a server and a worker are killed with kill -9, Temporal is killed and restarted and
// PostgreSQL crashes and recovers. It fails on anything lost, doubled or stranded, on a
// pattern that completed nothing, and on memory or history per operation that did not stay
// flat. SW4RM_SOAK_DURATION lengthens the load (the one-hour figures of reliability.md come
// from `make soak`, which runs the same profile through sw4rm-cluster).
package soak_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/soak"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// need skips the test when the kit's tools are missing, and fails it under CI, where `make
// cluster-tools` must have installed them.
func need(t *testing.T) (server, sqlTool string) {
	t.Helper()
	server, sqlTool = cluster.FindTool("temporal-server"), cluster.FindTool("temporal-sql-tool")
	if server != "" && sqlTool != "" {
		return server, sqlTool
	}
	msg := "temporal-server or temporal-sql-tool missing: run `make cluster-tools`"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", ""
}

func TestSoak(t *testing.T) {
	server, sqlTool := need(t)
	duration := 3 * time.Minute
	if v := os.Getenv("SW4RM_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("SW4RM_SOAK_DURATION=%q: want a duration of at least 1m", v)
		}
		duration = d
	}
	state, err := os.MkdirTemp("", "sw4rm-soak-test-")
	if err != nil {
		t.Fatal(err)
	}
	// The kit runs its PostgreSQL as the postgres user (initdb refuses root), which must
	// reach the cluster's directory inside this one.
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(state)
		} else {
			t.Logf("logs kept in %s", state)
		}
	})
	bin := filepath.Join(state, "sw4rm")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sw4rm/sw4rm-temporal/cmd/sw4rm").CombinedOutput(); err != nil {
		t.Fatalf("build sw4rm: %v\n%s", err, out)
	}
	token, keyFile := operator(t, state)

	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		StateDir: filepath.Join(state, "cluster"), TemporalServer: server, SQLTool: sqlTool, SW4RM: bin,
		Env:  soakEnv(token, keyFile),
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
	if problems := res.Problems(); len(problems) > 0 {
		t.Errorf("soak failed:\n  %s", strings.Join(problems, "\n  "))
	}
	lost, doubled, stranded := res.Summary.Final.Failures()
	t.Logf("soak: %s of load, %d faults, %d operations completed: %d lost, %d doubled, %d stranded; flat: %v",
		duration, len(res.Faults), res.Summary.Final.Completed(), lost, doubled, stranded, res.Flat)
}

// operator makes the HITL operator the load generator decides as, and the decision key the
// servers sign operators' decisions with (docs/hitl.md).
func operator(t *testing.T, dir string) (token, keyFile string) {
	t.Helper()
	seed := make([]byte, 32)
	tok := make([]byte, 16)
	if _, err := rand.Read(seed); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	keyFile = filepath.Join(dir, "hitl-decision.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(seed)), 0o600); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(tok), keyFile
}

// soakEnv is the sw4rm settings of the soak: agents register unsigned (the load generator's
// agents carry no keys), one HITL operator, the decision key.
func soakEnv(token, keyFile string) []string {
	return []string{
		"SW4RM_AUTH=optional",
		"SW4RM_HITL_OPERATORS=soak=" + token,
		"SW4RM_HITL_DECISION_KEY_FILE=" + keyFile,
		"SW4RM_LOG_LEVEL=info",
	}
}
