package cluster

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestParseStat: the parent pid and CPU ticks are read after the command name, which
// may hold spaces and parentheses.
func TestParseStat(t *testing.T) {
	line := []byte("4242 (postgres: wal (writer)) S 4200 4242 4242 0 -1 4194560 120 0 0 0 37 12 0 0 20 0 1 0 9 0 0\n")
	ppid, ticks, ok := parseStat(line)
	if !ok || ppid != 4200 || ticks != 49 {
		t.Fatalf("parseStat = %d, %d, %v; want 4200, 49, true", ppid, ticks, ok)
	}
	if _, _, ok := parseStat([]byte("4242 (truncated")); ok {
		t.Fatal("a line without its closing parenthesis was read")
	}
	if _, _, ok := parseStat([]byte("1 (x) S 0 1")); ok {
		t.Fatal("a short line was read")
	}
}

// TestDescendants: a child and grandchild, one of which left the process group (as PostgreSQL's
// backends do), are found.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sh -c 'sleep 30' & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for len(descendants(cmd.Process.Pid)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("descendants of %d: %v, want the setsid shell and its sleep", cmd.Process.Pid, descendants(cmd.Process.Pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range descendants(cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if descendants(0) != nil {
		t.Fatal("pid 0 has descendants")
	}
}
