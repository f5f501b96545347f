//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// abiVersion is the kernel's Landlock ABI version, asked once; 0 when Landlock is missing or
// disabled.
var abiVersion = sync.OnceValues(func() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, err
	}
	return v, nil
})

// available reports why the host cannot confine a process with Landlock, nil when it can.
func available() error {
	v, err := abiVersion()
	if err != nil {
		return fmt.Errorf("landlock is not available in this kernel (%v); the deployment must run Linux 5.13 or later with Landlock enabled (lsm=landlock)", err)
	}
	if v < 1 {
		return errors.New("landlock is disabled in this kernel; the deployment must enable it (lsm=landlock)")
	}
	return nil
}

// ABI is the kernel's Landlock ABI version; 0 when Landlock is unavailable.
func ABI() int {
	v, _ := abiVersion()
	return v
}

// ApplyFromEnv is the init process's side: when its environment holds EnvSpec it removes
// it, moves itself into the spec's cgroup, sets the resource limits and restricts itself
// with Landlock, so that the program it starts next inherits all of it. Without EnvSpec it
// does nothing. An error means the program must not be started.
func ApplyFromEnv() error {
	raw, ok := os.LookupEnv(EnvSpec)
	if !ok {
		return nil
	}
	// The program must not see the spec, nor pass it to an init of its own.
	if err := os.Unsetenv(EnvSpec); err != nil {
		return err
	}
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("the sandbox spec does not decode: %w", err)
	}
	// The cgroup first: once Landlock holds, /sys/fs/cgroup is out of reach.
	if spec.PidsCgroup != "" {
		if err := joinCgroup(spec.PidsCgroup); err != nil {
			return fmt.Errorf("joining the call's pids cgroup: %w", err)
		}
	}
	// Before Landlock, which forbids changing the mounts.
	if spec.PrivateRun {
		if err := hideRunDirs(spec); err != nil {
			return fmt.Errorf("hiding the host's /run: %w", err)
		}
	}
	if err := setLimits(spec.Limits); err != nil {
		return fmt.Errorf("setting the resource limits: %w", err)
	}
	return restrict(spec)
}

// restrict applies the spec's Landlock rules to the calling thread, and so to every
// process it starts after.
//
// Best effort is used only above the first ABI, where the downgrade still confines the
// filesystem: ABI 1 restricts every file access; later ABIs add truncation (3), device
// ioctls (5), and the signal and abstract-socket scopes (6). The "refer" right (ABI 2), which
// lets a process move and link files between directories of the worktree, is asked for only
// where the kernel has it, because go-landlock's best effort would otherwise downgrade a
// rule with refer to no restriction at all. Without refer (ABI 1) every cross-directory
// move or link is refused, which still confines. The network is not restricted here:
// network_policy is enforced by the provider's network namespace.
func restrict(spec Spec) error {
	if err := available(); err != nil {
		return err
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V6.HandledAccessFS, Scoped: landlock.V6.Scoped}.BestEffort()
	rw := landlock.RWDirs(spec.ReadWrite...)
	if ABI() >= 2 {
		rw = rw.WithRefer()
	}
	var roDirs, roFiles, rwFiles, roDevs []string
	for _, p := range spec.ReadOnly {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			// Missing paths are skipped: the default list names paths of several
			// distributions.
		case fi.IsDir():
			roDirs = append(roDirs, p)
		default:
			roFiles = append(roFiles, p)
		}
	}
	for _, p := range rwDevices {
		if _, err := os.Stat(p); err == nil {
			rwFiles = append(rwFiles, p)
		}
	}
	for _, p := range roDevices {
		if _, err := os.Stat(p); err == nil {
			roDevs = append(roDevs, p)
		}
	}
	rules := []landlock.Rule{
		rw,
		landlock.RODirs(roDirs...).IgnoreIfMissing(),
		landlock.ROFiles(roFiles...).IgnoreIfMissing(),
		landlock.RWFiles(rwFiles...).IgnoreIfMissing(),
		landlock.ROFiles(roDevs...).IgnoreIfMissing(),
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if fd < 0 {
		return errors.New("landlock: the kernel restricts nothing with these rules")
	}
	defer func() { _ = syscall.Close(fd) }()
	// Only this thread is restricted, and the program is started from it: go-landlock's
	// all-threads enforcement (psx) signals every thread, which hangs in an init that is
	// PID 1 of its namespace. The goroutine stays locked to the thread for the rest of the
	// init's life, so the program, forked from it, inherits the domain and no_new_privs.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock: restricting the init: %w", err)
	}
	return dropCapabilities()
}

// dropCapabilities leaves the calling thread, and the program it starts, without any
// capability: a server running as root would otherwise give its tools CAP_SYS_MODULE
// (load a kernel module), CAP_SYS_RAWIO (/proc/kcore), CAP_DAC_OVERRIDE and the rest,
// which Landlock does not take away. The bounding set is emptied first, so that no
// capability comes back at exec; the program keeps uid 0 and owns what root owns.
func dropCapabilities() error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if errors.Is(err, unix.EPERM) {
				break // not privileged: there is nothing to drop
			}
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	return nil
}
