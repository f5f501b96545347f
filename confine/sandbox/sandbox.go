// Package sandbox confines the processes the tool providers start — a process.run call of
// the built-in provider, an MCP stdio server started per worktree — by the kernel rather
// than by their arguments (§18.4, §6.4, §23 "syscall-level boundaries where feasible"):
//
//   - Landlock (Linux ≥ 5.13, unprivileged, github.com/landlock-lsm/go-landlock): the
//     process may write only its worktree and a private temporary directory, and read (and
//     execute) only the system paths a program needs (DefaultReadPaths plus the deployment's
//     Policy.ReadPaths), and, for git, exactly the parts of the repository's .git this
//     worktree uses (GitPaths). Signals and abstract UNIX sockets are scoped to the sandbox
//     (Landlock ABI 6): the process cannot signal the worker;
//   - resource limits: processes (a pids cgroup where the server may make one, and
//     RLIMIT_NPROC), file size (RLIMIT_FSIZE), address space (RLIMIT_AS) and open files
//     (RLIMIT_NOFILE).
//
// The worker side prepares a Run (Policy.Prepare): the private temporary directory, the
// cgroup, and the Spec. The Spec travels to the init process the provider starts through the
// server's own executable (tools/builtin's RunInitIfAsked) in the environment variable
// EnvSpec, which the init removes (ApplyFromEnv) before it confines itself and starts the
// program; the program inherits the confinement and can never lift it. docs/tools.md
// ("What a process can reach") says what is granted and why.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// EnvSpec carries the Spec from the worker to the init process; the init removes it from
// its environment before it starts the program.
const EnvSpec = "SW4RM_INTERNAL_SANDBOX_SPEC"

// InitArg is the first argument that makes the server's own executable the init process
// of a confined program (tools/builtin's RunInitIfAsked, which every binary that runs tools
// calls first in main).
const InitArg = "__sw4rm-tool-init"

// DefaultReadPaths are the paths a process may read and execute whatever the deployment
// adds: programs and libraries (/usr, /bin, /sbin, /lib*), the dynamic loader's cache,
// certificates, the user and group names (no passwords: /etc/shadow is not in the list),
// name resolution, time zones, and git's system configuration. Missing paths are skipped.
// The Go toolchain under /usr/local/go is in /usr. /proc is readable because runtimes and
// tools read their own entries there (/proc/self, /proc/net, /proc/cpuinfo); another
// process's environment, memory, descriptors and root stay out of reach, because Landlock
// refuses ptrace-mode access to processes outside the sandbox, but its command line is
// visible: a deployment passes secrets in the environment or files, never in flags. /sys is
// not in the list.
var DefaultReadPaths = []string{
	"/proc",
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki", "/etc/alternatives",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
	"/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/localtime", "/etc/timezone",
	"/etc/mime.types", "/etc/gitconfig", "/etc/os-release",
}

// Devices a process may open: /dev/null, /dev/zero and /dev/full read and write,
// /dev/random and /dev/urandom read. No other device (no terminal, no disk).
var (
	rwDevices = []string{"/dev/null", "/dev/zero", "/dev/full"}
	roDevices = []string{"/dev/random", "/dev/urandom"}
)

// Limits bound the resources of one confined process tree; 0 leaves a resource unbounded.
type Limits struct {
	// Procs bounds the processes (and threads) of the call.
	Procs int `json:"procs,omitempty"`
	// FileBytes bounds the size of a file the process writes (RLIMIT_FSIZE): past it, the
	// write fails and the process gets SIGXFSZ.
	FileBytes int64 `json:"file_bytes,omitempty"`
	// MemoryBytes bounds each process's address space (RLIMIT_AS).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// OpenFiles bounds each process's open file descriptors (RLIMIT_NOFILE).
	OpenFiles int `json:"open_files,omitempty"`
}

// Defaults of Limits (the settings SW4RM_TOOL_MAX_*).
const (
	// DefaultProcs is the default process limit: enough for a parallel build, far from a
	// fork bomb's thousands.
	DefaultProcs = 512
	// DefaultFileBytes is the default file size limit: 1 GiB.
	DefaultFileBytes = 1 << 30
	// DefaultMemoryBytes is the default address-space limit: 16 GiB. It bounds virtual
	// memory, which runtimes reserve generously (node reserves several GiB it never
	// touches), so it is set well above what a process uses.
	DefaultMemoryBytes = 16 << 30
	// DefaultOpenFiles is the default open-file limit.
	DefaultOpenFiles = 4096
)

// DefaultLimits are the limits of a zero Policy.
var DefaultLimits = Limits{Procs: DefaultProcs, FileBytes: DefaultFileBytes, MemoryBytes: DefaultMemoryBytes, OpenFiles: DefaultOpenFiles}

// Policy is a deployment's confinement of tool processes.
type Policy struct {
	// ReadPaths are absolute paths a process may read and execute besides DefaultReadPaths
	// (SW4RM_TOOL_READ_PATHS): a toolchain elsewhere, a read-only module cache.
	ReadPaths []string
	// WritePaths are absolute paths every process may also write (SW4RM_TOOL_WRITE_PATHS):
	// a build cache shared by the calls, such as Go's GOCACHE. A shared writable path is a
	// channel between calls — one call can plant what another reads (a poisoned cache
	// entry) — so a deployment whose agents do not trust each other leaves it empty.
	WritePaths []string
	// Limits bound each call's resources.
	Limits Limits
}

// DefaultPolicy is the confinement of a deployment that configures none.
func DefaultPolicy() *Policy { return &Policy{Limits: DefaultLimits} }

// ParsePaths parses SW4RM_TOOL_READ_PATHS and SW4RM_TOOL_WRITE_PATHS: absolute paths
// separated by commas (or colons); empty entries are skipped.
func ParsePaths(s string) ([]string, error) {
	var out []string
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ':' }) {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%q is not an absolute path", p)
		}
		out = append(out, filepath.Clean(p))
	}
	return out, nil
}

// Spec is what the init process applies before it starts the program.
type Spec struct {
	// ReadWrite are directories the process may read, write and execute in: the worktree,
	// the private temporary directory, the worktree's own git directory.
	ReadWrite []string `json:"rw"`
	// ReadOnly are files and directories it may read and execute.
	ReadOnly []string `json:"ro"`
	// Limits are the resource limits.
	Limits Limits `json:"limits"`
	// PidsCgroup is the cgroup directory the init moves itself into before it starts the
	// program, whose pids.max bounds the call's processes; empty: none.
	PidsCgroup string `json:"pids_cgroup,omitempty"`
	// PrivateRun says the init runs in a mount namespace of its own (Wrap), where it hides
	// /run, and with it the host daemons' UNIX sockets, under an empty tmpfs.
	PrivateRun bool `json:"private_run,omitempty"`
}

// Request names what one confined process is for.
type Request struct {
	// Worktree is the directory the process may write: the caller's worktree; empty for a
	// server shared by every worktree, which may then write only its temporary directory.
	Worktree string
	// Program is the program's path as it will be executed, for ReadOnly grants of its own
	// installation (MCP servers); empty for process.run, whose programs come from the
	// system paths or the worktree.
	Program string
}

// ErrUnavailable is wrapped by Prepare's error when the host cannot confine a process:
// Landlock is missing or disabled. The provider then refuses the call with
// PERMISSION_DENIED rather than run it unconfined.
var ErrUnavailable = errors.New("the host cannot confine the process")

// Run is one prepared confinement: its private temporary directory and cgroup exist until
// Cleanup.
type Run struct {
	// Spec is what the init applies.
	Spec Spec
	// TempDir is the process's private temporary directory ($TMPDIR).
	TempDir string
	cgroup  string
}

// Prepare makes the confinement of one process: checks that the host has Landlock
// (ErrUnavailable otherwise), creates the private temporary directory and, where the server
// may make one, the pids cgroup, and computes the Spec. The caller must call Cleanup once
// the process and everything it started have ended.
func (p *Policy) Prepare(req Request) (*Run, error) {
	if err := available(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	tmp, err := os.MkdirTemp("", "sw4rm-tool-tmp-")
	if err != nil {
		return nil, fmt.Errorf("making the process's temporary directory: %w", err)
	}
	r := &Run{TempDir: tmp, Spec: Spec{Limits: p.Limits}}
	r.Spec.ReadWrite = append(r.Spec.ReadWrite, tmp)
	for _, w := range p.WritePaths {
		if _, err := os.Stat(w); err == nil {
			r.Spec.ReadWrite = append(r.Spec.ReadWrite, w)
		}
	}
	if req.Worktree != "" {
		wt, err := filepath.EvalSymlinks(req.Worktree)
		if err != nil {
			r.Cleanup()
			return nil, fmt.Errorf("resolving the worktree: %w", err)
		}
		r.Spec.ReadWrite = append(r.Spec.ReadWrite, wt)
		gitRW, gitRO := GitPaths(wt)
		r.Spec.ReadWrite = append(r.Spec.ReadWrite, gitRW...)
		r.Spec.ReadOnly = append(r.Spec.ReadOnly, gitRO...)
	}
	r.Spec.ReadOnly = append(r.Spec.ReadOnly, DefaultReadPaths...)
	r.Spec.ReadOnly = append(r.Spec.ReadOnly, p.ReadPaths...)
	if req.Program != "" {
		r.Spec.ReadOnly = append(r.Spec.ReadOnly, programPaths(req.Program)...)
	}
	r.Spec.ReadOnly = slices.Compact(r.Spec.ReadOnly)
	if p.Limits.Procs > 0 {
		r.cgroup = newPidsCgroup(p.Limits.Procs)
		r.Spec.PidsCgroup = r.cgroup
	}
	return r, nil
}

// Env is what the program's environment gains: TMPDIR, its private temporary directory,
// and EnvSpec for the init (which removes it).
func (r *Run) Env() ([]string, error) {
	b, err := json.Marshal(r.Spec)
	if err != nil {
		return nil, err
	}
	return []string{"TMPDIR=" + r.TempDir, EnvSpec + "=" + string(b)}, nil
}

// ProcsLimitReached reports whether the call's processes hit the process limit of its
// cgroup (pids.events). Without a cgroup it reports false: RLIMIT_NPROC keeps no count.
func (r *Run) ProcsLimitReached() bool {
	return r.cgroup != "" && pidsLimitHit(r.cgroup)
}

// Cleanup removes the temporary directory and the cgroup.
func (r *Run) Cleanup() {
	if r.TempDir != "" {
		_ = os.RemoveAll(r.TempDir)
	}
	if r.cgroup != "" {
		removeCgroup(r.cgroup)
	}
}

// programPaths are the read grants an MCP server's program needs beyond the system paths:
// the installation the program belongs to (the directory holding the node_modules it was
// found in, or its own directory) and the prefix of the interpreter its "#!" line names
// (node under ~/.nvm/versions/node/vX/bin: that vX).
func programPaths(program string) []string {
	var out []string
	for _, p := range []string{program, realPath(program)} {
		if p == "" {
			continue
		}
		out = append(out, installRoot(p))
	}
	if interp := interpreter(realPath(program)); interp != "" {
		out = append(out, filepath.Dir(filepath.Dir(interp)))
	}
	return out
}

func realPath(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

// installRoot is the parent of the outermost node_modules directory above path, else
// path's directory.
func installRoot(path string) string {
	dir := filepath.Dir(path)
	root := dir
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if filepath.Base(d) == "node_modules" {
			root = filepath.Dir(d)
		}
	}
	return root
}

// Available reports why the host cannot confine a process (Landlock is missing or
// disabled), nil when it can.
func Available() error { return available() }
