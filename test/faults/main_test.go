// Package faults is SW4RM's fault suite: it runs the real `sw4rm` binary as separate
// processes, a Temporal dev server and a PostgreSQL cluster of its own, kills them the way
// an operator's machine would (SIGKILL, `pg_ctl stop -m immediate`), and drives the system
// over gRPC with the Go SDK exactly as agent processes do. Each scenario prints one line of
// figures — messages accepted, lost, handled twice, stranded tasks, HITL callers that lost
// their decision — and asserts the promised ones (docs/reliability.md).
package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// tools are the programs the suite runs, found once by TestMain.
var tools struct {
	// sw4rm is the binary built from ./cmd/sw4rm for this run.
	sw4rm string
	// temporal is the Temporal CLI (its dev server).
	temporal string
	// pgBin is the directory holding initdb and pg_ctl.
	pgBin string
	// pgUID and pgGID run PostgreSQL when the suite runs as root, which initdb refuses.
	pgUID, pgGID int
	// asRoot reports that the suite runs as root.
	asRoot bool
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	// The suite starts its own test binary as an agent process (TestHandoffAgentKilled): it
	// needs neither the tools nor the build.
	if os.Getenv(handoffAgentAddrEnv) != "" {
		return runHandoffAgent()
	}
	if os.Getenv(boundAgentAddrEnv) != "" { // TestAgentKilledWhileBound
		return runBoundAgent()
	}
	if missing := findTools(); missing != "" {
		msg := "fault suite needs " + missing
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			return 1
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		return 0
	}
	dir, err := os.MkdirTemp("", "sw4rm-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tools.sw4rm = filepath.Join(dir, "sw4rm")
	// The binary the operator runs: built once, without the race detector, so that the
	// processes under test keep the timing of a real deployment on a 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", tools.sw4rm, "github.com/sw4rm/sw4rm-temporal/cmd/sw4rm")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: build sw4rm:", err)
		return 1
	}
	return m.Run()
}

// findTools locates the Temporal CLI and PostgreSQL's server binaries, and the user
// PostgreSQL runs as; it returns what is missing, or "".
func findTools() string {
	tools.temporal = temporalCLI()
	if tools.temporal == "" {
		return "the Temporal CLI: run `make temporal` or set SW4RM_TEMPORAL_CLI"
	}
	tools.pgBin = postgresBin()
	if tools.pgBin == "" {
		return "PostgreSQL's initdb and pg_ctl (Debian's postgresql package; .ci/run installs it)"
	}
	tools.asRoot = os.Geteuid() == 0
	if tools.asRoot {
		// initdb and postgres refuse to run as root: the cluster belongs to the postgres user
		// the Debian package creates.
		u, err := user.Lookup("postgres")
		if err != nil {
			return "a postgres user to run PostgreSQL as (the suite runs as root, which initdb refuses)"
		}
		tools.pgUID, _ = strconv.Atoi(u.Uid)
		tools.pgGID, _ = strconv.Atoi(u.Gid)
	}
	return ""
}

// temporalCLI finds the Temporal CLI: $SW4RM_TEMPORAL_CLI, the Makefile's install location,
// then PATH.
func temporalCLI() string {
	if p := os.Getenv("SW4RM_TEMPORAL_CLI"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "sw4rm", "bin", "temporal")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	return ""
}

// postgresBin finds the directory of initdb and pg_ctl: Debian keeps them out of PATH under
// /usr/lib/postgresql/<version>/bin (the newest version wins), elsewhere they are on PATH.
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isFile(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	return ""
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
