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
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
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

// build builds cmd/sw4rm of the tree at commit (the working tree when commit is empty) into
// dir/name.
func build(t *testing.T, dir, name, commit string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	src := ""
	if commit != "" {
		src = filepath.Join(dir, name+"-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			t.Fatal(err)
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), commit, src)
		if out, err := archive.CombinedOutput(); err != nil {
			t.Fatalf("git archive %s: %v\n%s", commit, err, out)
		}
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sw4rm")
	cmd.Dir = src
	if src == "" {
		cmd = exec.Command("go", "build", "-o", bin, "github.com/sw4rm/sw4rm-temporal/cmd/sw4rm")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sw4rm %s: %v\n%s", name, err, out)
	}
	return bin
}

func TestRollingUpgrade(t *testing.T) {
	server, sqlTool := need(t)
	release, commit := previousRelease(t)
	dir, err := os.MkdirTemp("", "sw4rm-upgrade-test-")
	if err != nil {
		t.Fatal(err)
	}
	// The kit runs its PostgreSQL as the postgres user, which must reach the cluster's
	// directory inside this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("logs kept in %s", dir)
		}
	})
	start := time.Now()
	oldBin := build(t, dir, "sw4rm-"+release, commit)
	newBin := build(t, dir, "sw4rm-current", "")
	t.Logf("built %s (%s) and the current tree in %s", release, commit[:12], time.Since(start).Round(time.Second))
	token, keyFile := operator(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		StateDir: filepath.Join(dir, "cluster"), TemporalServer: server, SQLTool: sqlTool, SW4RM: oldBin,
		Env: []string{
			"SW4RM_AUTH=optional",
			"SW4RM_HITL_OPERATORS=upgrade=" + token,
			"SW4RM_HITL_DECISION_KEY_FILE=" + keyFile,
			"SW4RM_LOG_LEVEL=info",
		},
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

// operator makes the HITL operator the load generator decides as, and the decision key the
// servers sign operators' decisions with (docs/hitl.md).
func operator(t *testing.T, dir string) (token, keyFile string) {
	t.Helper()
	seed, tok := make([]byte, 32), make([]byte, 16)
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
