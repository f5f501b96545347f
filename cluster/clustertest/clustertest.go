// Package clustertest holds what the tests that run on the cluster kit share (test/cluster,
// test/soak, test/upgrade): finding the kit's tools, a state directory the kit's PostgreSQL
// can reach, building sw4rm at a commit, and a HITL operator with its decision key.
package clustertest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/cluster"
)

// NeedTools returns the paths of temporal-server and temporal-sql-tool. It skips the test
// when they are missing, and fails it under CI (CI=true), where `make cluster-tools` must have
// installed them.
func NeedTools(t testing.TB) (server, sqlTool string) {
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

// StateDir makes a directory for a test's binaries and cluster state under the system's
// temp dir, searchable by everyone: the kit runs its own PostgreSQL as the postgres user when
// the test runs as root (initdb refuses root), and t.TempDir's parents are private. It is
// removed when the test passes and kept, with its logs, when it fails.
func StateDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// Build builds cmd/sw4rm into dir/name: of the tree at commit, extracted with git archive
// from the repository the test runs in, or of the working tree when commit is empty.
func Build(t testing.TB, dir, name, commit string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sw4rm/sw4rm-temporal/cmd/sw4rm")
	if commit != "" {
		src := filepath.Join(dir, name+"-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			t.Fatalf("git rev-parse --show-toplevel: %v", err)
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), commit, src)
		if out, err := archive.CombinedOutput(); err != nil {
			t.Fatalf("git archive %s: %v\n%s", commit, err, out)
		}
		cmd = exec.Command("go", "build", "-o", bin, "./cmd/sw4rm")
		cmd.Dir = src
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sw4rm %s: %v\n%s", name, err, out)
	}
	return bin
}

// Operator makes a HITL operator named name and the decision key the servers sign
// operators' decisions with (docs/hitl.md), the key file in dir. It returns the operator's
// token and the settings that configure both, with SW4RM_AUTH=optional so that agents
// without keys (the load generator's) may register.
func Operator(t testing.TB, dir, name string) (token string, env []string) {
	t.Helper()
	seed, tok := make([]byte, 32), make([]byte, 16)
	if _, err := rand.Read(seed); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "hitl-decision.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(seed)), 0o600); err != nil {
		t.Fatal(err)
	}
	token = hex.EncodeToString(tok)
	return token, []string{
		"SW4RM_AUTH=optional",
		"SW4RM_HITL_OPERATORS=" + name + "=" + token,
		"SW4RM_HITL_DECISION_KEY_FILE=" + keyFile,
	}
}
