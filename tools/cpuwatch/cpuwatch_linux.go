//go:build linux

package cpuwatch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: Linux reports them in ticks of
// 1/100 s on every architecture, whatever the kernel's own tick rate.
const userHZ = 100

// cgroupPrefix starts the name of every cgroup this package creates; the pid of the server
// that created it follows, so that a later server can remove those a dead one left.
const cgroupPrefix = "sw4rm-"

// drainTimeout bounds how long Close waits for a killed cgroup to empty before removing it.
const drainTimeout = 2 * time.Second

// Watch measures the CPU time of one process and of everything it starts (Prepare). It is
// safe for concurrent use once Started.
type Watch struct {
	mech Mechanism
	// dir is the cgroup's directory (MechanismCgroup).
	dir string
	// fd is the cgroup's directory, open until the process started in it.
	fd *os.File
	// proc reads /proc (MechanismProc).
	proc procfs.FS
	// root and pgid are the watched process and its process group (0: none of its own).
	root, pgid atomic.Int64

	closeOnce sync.Once
}

var (
	// forceProc makes New use MechanismProc; for tests of the fallback.
	forceProc atomic.Bool
	// seq numbers the cgroups this process creates.
	seq atomic.Uint64
)

// New readies a Watch for a process about to start. With a writable cgroup v2 hierarchy
// (CgroupAvailable) it creates a cgroup, which Apply makes the process start in (clone3 with
// CLONE_INTO_CGROUP, so not even its first instruction runs outside); otherwise the Watch
// samples /proc, and New fails only when /proc cannot be read — then nothing can be
// measured and a budget cannot be enforced. Apply it to the command, call Started once the
// process started, and Close once it ended (also when it never started).
func New() (*Watch, error) {
	if base := cgroupBase(); base != "" && !forceProc.Load() {
		dir := filepath.Join(base, fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), seq.Add(1)))
		if err := os.Mkdir(dir, 0o755); err == nil {
			fd, err := os.Open(dir)
			if err == nil {
				return &Watch{mech: MechanismCgroup, dir: dir, fd: fd}, nil
			}
			_ = os.Remove(dir)
		}
		// A hierarchy that worked at the probe and fails now (a limit of descendants
		// reached): /proc still measures.
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("neither a writable cgroup v2 hierarchy nor a readable /proc to measure CPU time: %w", err)
	}
	return &Watch{mech: MechanismProc, proc: fs}, nil
}

// Prepare is New, applied to cmd.
func Prepare(cmd *exec.Cmd) (*Watch, error) {
	w, err := New()
	if err != nil {
		return nil, err
	}
	w.Apply(cmd)
	return w, nil
}

// Apply makes cmd start in w's cgroup; nothing under /proc, or for a nil Watch. Other
// fields of cmd.SysProcAttr are kept.
func (w *Watch) Apply(cmd *exec.Cmd) {
	if w == nil || w.fd == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(w.fd.Fd())
}

// Mechanism says how w measures; "" for a nil Watch.
func (w *Watch) Mechanism() Mechanism {
	if w == nil {
		return ""
	}
	return w.mech
}

// Exact reports whether Used is the kernel's own sum (a cgroup) rather than a /proc sample.
func (w *Watch) Exact() bool { return w != nil && w.mech == MechanismCgroup }

// Started records the watched process and its process group (0 when it has none of its
// own); the cgroup's directory, needed only to start the process in it, is closed.
func (w *Watch) Started(pid, pgid int) {
	if w == nil {
		return
	}
	w.root.Store(int64(pid))
	w.pgid.Store(int64(pgid))
	w.closeFD()
}

func (w *Watch) closeFD() {
	if w.fd != nil {
		_ = w.fd.Close()
		w.fd = nil
	}
}

// Used is the CPU time, user and system, used so far by the watched process and every
// process it started, including those that exited.
func (w *Watch) Used() time.Duration {
	if w == nil {
		return 0
	}
	if w.mech == MechanismCgroup {
		return cgroupUsage(w.dir)
	}
	return w.treeCPU()
}

// Kill sends SIGKILL to every process w counts (nothing for a nil Watch): with a cgroup through cgroup.kill (or, on a
// kernel without it, to each process listed in cgroup.procs); under /proc to the watched
// process's tree and process group. Under /proc it must be called only while the watched
// process has not been waited for, since its pid could otherwise name another process.
func (w *Watch) Kill() {
	if w == nil {
		return
	}
	if w.mech == MechanismCgroup {
		killCgroup(w.dir)
		return
	}
	// Stopped first, until no new one appears: a stopped process forks no more, and killing
	// a parent before its children were listed would hand them to another reaper, out of
	// the tree.
	stopped := map[int]bool{}
	for range 10 {
		fresh := false
		for _, pid := range w.tree() {
			if !stopped[pid] {
				stopped[pid], fresh = true, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if !fresh {
			break
		}
	}
	if pg := int(w.pgid.Load()); pg > 0 {
		_ = syscall.Kill(-pg, syscall.SIGKILL)
	}
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Close ends a Watch: its cgroup is killed, waited for (at most 2 s) and removed; one that
// does not empty in time is removed in the background once it does. Under /proc there is
// nothing to remove. Close is idempotent, and does nothing for a nil Watch.
func (w *Watch) Close() {
	if w == nil {
		return
	}
	w.closeOnce.Do(func() {
		w.closeFD()
		if w.mech != MechanismCgroup {
			return
		}
		killCgroup(w.dir)
		if removeWhenEmpty(w.dir, drainTimeout) {
			return
		}
		go removeWhenEmpty(w.dir, time.Minute)
	})
}

// cgroupUsage reads usage_usec from the cgroup's cpu.stat: present in every cgroup v2,
// whether or not the cpu controller is enabled.
func cgroupUsage(dir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("usage_usec ")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err == nil {
				return time.Duration(n) * time.Microsecond
			}
		}
	}
	return 0
}

// killCgroup kills every process in the cgroup.
func killCgroup(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil || !errors.Is(err, os.ErrNotExist) {
		return
	}
	// Before Linux 5.14: one by one. A process forking meanwhile is caught by the next round.
	for range 10 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return
		}
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeWhenEmpty removes the cgroup once no process is left in it, waiting at most wait;
// it reports whether the cgroup is gone.
func removeWhenEmpty(dir string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tree lists the watched process, its live descendants (by parent pid) and the members of
// its process group.
func (w *Watch) tree() []int {
	_, members := w.scan()
	return members
}

// treeCPU sums, over the watched process's tree (tree), each process's own user and system
// time and that of the children it reaped, which have left /proc.
func (w *Watch) treeCPU() time.Duration {
	ticks, _ := w.scan()
	return time.Duration(ticks) * time.Second / userHZ
}

// scan reads /proc once: the CPU ticks of the watched processes and their pids.
func (w *Watch) scan() (uint64, []int) {
	root, pgid := int(w.root.Load()), int(w.pgid.Load())
	if root <= 0 {
		return 0, nil
	}
	procs, err := w.proc.AllProcs()
	if err != nil {
		return 0, nil
	}
	type entry struct {
		ticks uint64
		ppid  int
		pgrp  int
	}
	all := make(map[int]entry, len(procs))
	children := map[int][]int{}
	for _, pr := range procs {
		st, err := pr.Stat()
		if err != nil {
			continue // gone since the listing
		}
		all[pr.PID] = entry{
			ticks: uint64(st.UTime) + uint64(st.STime) + uint64(max(st.CUTime, 0)) + uint64(max(st.CSTime, 0)),
			ppid:  st.PPID, pgrp: st.PGRP,
		}
		children[st.PPID] = append(children[st.PPID], pr.PID)
	}
	seen := map[int]bool{}
	var members []int
	var ticks uint64
	add := func(pid int) bool {
		e, ok := all[pid]
		if !ok || seen[pid] {
			return false
		}
		seen[pid] = true
		members = append(members, pid)
		ticks += e.ticks
		return true
	}
	queue := []int{root}
	if pgid > 0 {
		for pid, e := range all {
			if e.pgrp == pgid {
				queue = append(queue, pid)
			}
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if add(pid) {
			queue = append(queue, children[pid]...)
		}
	}
	return ticks, members
}

// ForceProc makes New use MechanismProc while on, as on a host without a writable cgroup
// v2 hierarchy, so that tests of other packages cover the fallback; it returns what undoes it.
func ForceProc() (restore func()) {
	was := forceProc.Swap(true)
	return func() { forceProc.Store(was) }
}

// CgroupAvailable reports whether Prepare puts processes in a cgroup of their own: this
// server's cgroup lies in a cgroup v2 hierarchy where it may create cgroups, and a trial
// process started in one was measured.
func CgroupAvailable() bool { return cgroupBase() != "" }

// cgroupBase is the directory under which Prepare creates cgroups — that of this server's
// own cgroup in the cgroup v2 hierarchy — or "" when there is none that works. Checked once
// per process; cgroups a dead server of this host left empty are removed then.
var cgroupBase = sync.OnceValue(func() string {
	dir := ownCgroupDir()
	if dir == "" || !probe(dir) {
		return ""
	}
	removeStale(dir)
	return dir
})

// ownCgroupDir finds this process's cgroup v2 directory: the "0::<path>" line of
// /proc/self/cgroup, under the mount point of a cgroup2 file system (/sys/fs/cgroup on a
// unified host, /sys/fs/cgroup/unified on a hybrid one) whose root holds it.
func ownCgroupDir() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	own := ""
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			own = p
		}
	}
	if own == "" || strings.Contains(own, "(deleted)") {
		return ""
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 {
			continue
		}
		root, mount := unescape(fields[3]), unescape(fields[4])
		rel, err := filepath.Rel(root, own)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		return filepath.Join(mount, rel)
	}
	return ""
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probe creates a cgroup under dir, starts `true` in it and reads its usage: the checks a
// call would need, done once. Containers often mount the hierarchy read-only, and a
// server that is not root may own no cgroup.
func probe(dir string) bool {
	path, err := exec.LookPath("true")
	if err != nil {
		return false
	}
	cg := filepath.Join(dir, fmt.Sprintf("%s%d-probe", cgroupPrefix, os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		return false
	}
	defer func() { _ = os.Remove(cg) }()
	fd, err := os.Open(cg)
	if err != nil {
		return false
	}
	defer fd.Close()
	if _, err := os.Stat(filepath.Join(cg, "cpu.stat")); err != nil {
		return false
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	return cmd.Run() == nil
}

// removeStale removes the empty cgroups that servers no longer running left under dir (a
// server killed before its Close).
func removeStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			continue // not ours, or its server still runs
		}
		_ = os.Remove(filepath.Join(dir, e.Name())) // fails, harmlessly, while processes remain
	}
}
