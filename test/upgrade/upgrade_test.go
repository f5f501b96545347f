// Package upgrade_test is the rolling-upgrade test (docs/deploy.md, "Upgrading"): it builds
// sw4rm at the previous release (the git tag testdata/previous-release names), starts the
// cluster kit with every server and worker on it, drives the mixed load of package loadgen
// — tasks with preemption, DAG runs, handoffs, negotiations, HITL approvals, tool calls and
// messages — and, while that load runs, replaces the workers and then the servers one by one
// with the current build, as an operator's rolling deploy does (SIGTERM, drain, start the new
// binary). Every operation started must finish correctly: nothing lost, nothing run twice,
// nothing stranded, and every pattern completing work after the last replacement.
package upgrade_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/clustertest"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// previousRelease resolves the previous release to a commit: the tag testdata/previous-release
// names, or, in a clone without tags, the commit written beside it.
func previousRelease(t *testing.T) (name, commit string) {
	t.Helper()
	b, err := os.ReadFile("testdata/previous-release")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("testdata/previous-release: want `<tag> <commit>`, have %q", b)
	}
	for _, rev := range f {
		out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
		if err == nil {
			return f[0], strings.TrimSpace(string(out))
		}
	}
	t.Fatalf("neither tag %s nor commit %s is in this clone: the rolling-upgrade test builds the previous release from git history (clone without --depth)", f[0], f[1])
	return "", ""
}

func TestRollingUpgrade(t *testing.T) {
	server, sqlTool := clustertest.NeedTools(t)
	release, commit := previousRelease(t)
	dir := clustertest.StateDir(t, "sw4rm-upgrade-test-")
	start := time.Now()
	oldBin := clustertest.Build(t, dir, "sw4rm-"+release, commit)
	newBin := clustertest.Build(t, dir, "sw4rm-current", "")
	t.Logf("built %s (%s) and the current tree in %s", release, commit[:12], time.Since(start).Round(time.Second))
	token, env := clustertest.Operator(t, dir, "upgrade")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		StateDir: filepath.Join(dir, "cluster"), TemporalServer: server, SQLTool: sqlTool, SW4RM: oldBin,
		Env:  append(env, "SW4RM_LOG_LEVEL=info"),
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer c.Stop()

	// The order an operator follows (docs/deploy.md): workers first, since an older worker
	// may not read what a newer server writes into a workflow; then the servers.
	var order []string
	for _, p := range c.Procs() {
		if strings.HasPrefix(p, "worker-") {
			order = append(order, p)
		}
	}
	for _, p := range c.Procs() {
		if strings.HasPrefix(p, "server-") {
			order = append(order, p)
		}
	}
	const (
		warmup  = 30 * time.Second // load on the old release alone
		spacing = 15 * time.Second // between two replacements
		after   = 45 * time.Second // load on the new release alone
	)
	load := warmup + time.Duration(len(order)-1)*spacing + after

	var (
		mu       sync.Mutex
		reports  []loadgen.Report
		upgraded time.Time // when the last process runs the new build
	)
	var wg sync.WaitGroup
	wg.Add(1)
	replaceErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		time.Sleep(warmup)
		for i, name := range order {
			if i > 0 {
				time.Sleep(spacing)
			}
			t0 := time.Now()
			if err := c.Replace(ctx, name, newBin); err != nil {
				replaceErr <- fmt.Errorf("replace %s: %w", name, err)
				return
			}
			t.Logf("%s replaced by the current build in %s", name, time.Since(t0).Round(100*time.Millisecond))
		}
		mu.Lock()
		upgraded = time.Now()
		mu.Unlock()
	}()

	sum, err := loadgen.Run(ctx, loadgen.Config{
		Addr: c.Addr(), Duration: load, Drain: 2 * time.Minute, Interval: 15 * time.Second,
		OperatorToken: token, Logf: t.Logf, DatabaseURL: c.DatabaseURL(),
		OnReport: func(r loadgen.Report) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, r)
		},
	}, os.Stdout)
	wg.Wait()
	select {
	case err := <-replaceErr:
		t.Fatal(err)
	default:
	}
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, name := range order {
		if got := c.Binary(name); got != newBin {
			t.Errorf("%s runs %s after the upgrade, want the current build", name, got)
		}
	}
	lost, doubled, stranded := sum.Final.Failures()
	if lost+doubled+stranded > 0 {
		t.Errorf("across the upgrade: %d lost, %d doubled, %d stranded", lost, doubled, stranded)
	}
	for _, p := range sum.Final.Patterns {
		if p.Failed+p.Refused+p.Unanswered > 0 {
			t.Errorf("%s: %d failed, %d refused, %d unanswered across the upgrade (notes %v)", p.Pattern, p.Failed, p.Refused, p.Unanswered, p.Notes)
		}
	}
	// Every pattern completes work once every process runs the new build: the last report
	// made before the upgrade ended against the final one.
	mu.Lock()
	var before loadgen.Report
	for _, r := range reports {
		if r.At.Before(upgraded) {
			before = r
		}
	}
	mu.Unlock()
	for _, p := range sum.Final.Patterns {
		prev, _ := before.Pattern(p.Pattern)
		if p.Completed <= prev.Completed {
			t.Errorf("%s completed nothing on the new build (%d before the last replacement, %d at the end)", p.Pattern, prev.Completed, p.Completed)
		}
	}
	t.Logf("rolling upgrade %s → current under load: %d operations completed, %d lost, %d doubled, %d stranded", release, sum.Final.Completed(), lost, doubled, stranded)
}
