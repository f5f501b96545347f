//go:build linux

package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// setLimits sets the init's resource limits, soft and hard alike, which the program inherits.
// A process cannot raise a hard limit without CAP_SYS_RESOURCE in the host's user namespace.
// RLIMIT_NPROC counts the processes of the real user: it bounds the call when the server
// is not root (the call runs in a user namespace of its own, whose count is the call's);
// the kernel exempts root from it, so for a root server the pids cgroup is what bounds the
// call (newPidsCgroup).
func setLimits(l Limits) error {
	set := func(res int, v uint64) error {
		return syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v})
	}
	const rlimitNPROC = 6 // RLIMIT_NPROC on Linux, missing from package syscall
	if l.Procs > 0 {
		if err := set(rlimitNPROC, uint64(l.Procs)); err != nil {
			return err
		}
	}
	if l.FileBytes > 0 {
		if err := set(syscall.RLIMIT_FSIZE, uint64(l.FileBytes)); err != nil {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		if err := set(syscall.RLIMIT_AS, uint64(l.MemoryBytes)); err != nil {
			return err
		}
	}
	if l.OpenFiles > 0 {
		if err := set(syscall.RLIMIT_NOFILE, uint64(l.OpenFiles)); err != nil {
			return err
		}
	}
	return nil
}

// pidsParent is the directory the call cgroups are made in, found once: the server's own
// cgroup of the pids controller — cgroup v1's pids hierarchy, or cgroup v2 where the
// server's cgroup delegates the pids controller (cgroup.subtree_control lists it) — when
// the server may make a directory there; "" otherwise.
var pidsParent = sync.OnceValue(findPidsParent)

func findPidsParent() string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",pids,"):
			v1 = parts[2]
		}
	}
	candidates := []string{}
	if v1 != "" {
		candidates = append(candidates, filepath.Join("/sys/fs/cgroup/pids", v1))
	}
	if v2 != "" {
		d := filepath.Join("/sys/fs/cgroup", v2)
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control")); err == nil && strings.Contains(" "+string(b)+" ", " pids") {
			candidates = append(candidates, d)
		}
	}
	for _, d := range candidates {
		probe := filepath.Join(d, "sw4rm-probe-"+randomName())
		if err := os.Mkdir(probe, 0o755); err != nil {
			continue
		}
		_, err := os.Stat(filepath.Join(probe, "pids.max"))
		_ = os.Remove(probe)
		if err == nil {
			sweepCgroups(d)
			return d
		}
	}
	return ""
}

func randomName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newPidsCgroup makes a cgroup whose pids.max is limit, for one call; "" when the server
// cannot make one (then RLIMIT_NPROC alone bounds the call, which does not bind root).
func newPidsCgroup(limit int) string {
	parent := pidsParent()
	if parent == "" {
		return ""
	}
	dir := filepath.Join(parent, "sw4rm-tool-"+randomName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		_ = os.Remove(dir)
		return ""
	}
	return dir
}

// joinCgroup moves the calling process into the cgroup dir ("0": the writer itself).
func joinCgroup(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0o644)
}

// pidsLimitHit reports whether a fork was refused in the cgroup for its pids.max.
func pidsLimitHit(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "max "); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			return v > 0
		}
	}
	return false
}

// removeCgroup removes a call's cgroup once its processes are gone: they were killed with
// the call, and the kernel takes a moment to release them.
func removeCgroup(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sweepCgroups removes the call cgroups a process that died mid-call left under parent:
// those older than a minute, which no call is about to join. The kernel refuses to remove
// one that still holds a process, so a running call keeps its own.
func sweepCgroups(parent string) {
	matches, _ := filepath.Glob(filepath.Join(parent, "sw4rm-tool-*"))
	for _, d := range matches {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = os.Remove(d)
		}
	}
}
