//go:build linux

package cpuwatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mechanisms runs f with each mechanism this host offers: the cgroup when a writable cgroup
// v2 hierarchy is there, and /proc always.
func mechanisms(t *testing.T, f func(t *testing.T, want Mechanism)) {
	for _, m := range []Mechanism{MechanismCgroup, MechanismProc} {
		t.Run(string(m), func(t *testing.T) {
			if m == MechanismCgroup && !CgroupAvailable() {
				t.Skip("no writable cgroup v2 hierarchy here; the /proc fallback is tested")
			}
			forceProc.Store(m == MechanismProc)
			t.Cleanup(func() { forceProc.Store(false) })
			f(t, m)
		})
	}
}

// start runs script under sh in a process group of its own, watched.
func start(t *testing.T, script string) (*exec.Cmd, *Watch) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := Prepare(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	w.Started(cmd.Process.Pid, cmd.Process.Pid)
	t.Cleanup(func() {
		w.Kill()
		_ = cmd.Wait()
		w.Close()
	})
	return cmd, w
}

// TestWatchCountsProcessesThatLeaveTheGroup: a descendant that calls setsid is in another
// session and process group, yet its CPU time is counted and Kill ends it.
func TestWatchCountsProcessesThatLeaveTheGroup(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	mechanisms(t, func(t *testing.T, want Mechanism) {
		_, w := start(t, `setsid sh -c 'while :; do :; done' & sleep 60`)
		if w.Mechanism() != want {
			t.Fatalf("mechanism %s, want %s", w.Mechanism(), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if !w.Exceeded(ctx, nil, 20*time.Millisecond, w.Used(), 200*time.Millisecond, nil) {
			t.Fatal("the setsid burner's CPU time was not counted")
		}
		members := members(t, w)
		if len(members) < 3 {
			t.Fatalf("watched processes %v: want sh, sleep and the burner", members)
		}
		w.Kill()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && anyAlive(members) {
			time.Sleep(20 * time.Millisecond)
		}
		if anyAlive(members) {
			t.Fatalf("processes %v outlived Kill", members)
		}
	})
}

// TestWatchCgroupCountsOrphans: with a cgroup, a double fork with setsid — an orphan in
// another session, adopted by the host's init — is still counted, and Close removes the
// cgroup.
func TestWatchCgroupCountsOrphans(t *testing.T) {
	if !CgroupAvailable() {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	cmd, w := start(t, `setsid sh -c 'sh -c "while :; do :; done" & exit 0'; sleep 60`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !w.Exceeded(ctx, nil, 20*time.Millisecond, 0, 200*time.Millisecond, nil) {
		t.Fatal("the orphan's CPU time was not counted")
	}
	w.Kill()
	_ = cmd.Wait()
	w.Close()
	if _, err := os.Stat(w.dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup %s is still there: %v", w.dir, err)
	}
}

// TestWatchUnderBudget: a quiet process stays under its budget until stop is closed.
func TestWatchUnderBudget(t *testing.T) {
	mechanisms(t, func(t *testing.T, _ Mechanism) {
		_, w := start(t, `sleep 60`)
		stop := make(chan struct{})
		time.AfterFunc(300*time.Millisecond, func() { close(stop) })
		if w.Exceeded(context.Background(), stop, 20*time.Millisecond, w.Used(), time.Second, nil) {
			t.Fatal("a sleeping process exceeded a budget of a second")
		}
	})
}

// members lists the processes w counts now.
func members(t *testing.T, w *Watch) []int {
	t.Helper()
	if w.Mechanism() == MechanismProc {
		return w.tree()
	}
	b, err := os.ReadFile(filepath.Join(w.dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// anyAlive reports whether any of pids still runs (a zombie has ended).
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
			return true
		}
	}
	return false
}
