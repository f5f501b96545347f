// Package confine is the one way a provider touches the files of a worktree (§6.4, §16,
// §23): every file operation goes through a Root, which keeps it inside the worktree
// directory and refuses, with an error wrapping ErrPermissionDenied (error_code
// permission_denied), whatever would leave it or harm it:
//
//   - path traversal ("../x", "a/../../x", Windows-style "..\x") and absolute paths outside
//     the worktree, including "/proc/self/root/…" forms;
//   - symbolic links that lead outside — absolute targets, relative targets that climb out,
//     chains of links, a linked directory in the middle of a path, a link with a trailing
//     slash;
//   - opening anything that is not a regular file or a directory: device nodes, FIFOs,
//     sockets;
//   - writes into .git: the worktree's .git file or directory, anything under it, and any
//     other path component named .git (nested repositories, submodules);
//   - NUL bytes in a path.
//
// It is built on os.Root, which opens every path component relative to a directory file
// descriptor without following a link out of the tree, and adds what os.Root does not do:
// the path canonicalization of §6.4 (which also finds a .git reached through a link), the
// file-type check, the .git rule and the NUL check. Every refusal is reported to the Audit
// hook (§19) before it is returned. docs/worktrees.md lists what application-level
// confinement cannot stop.
package confine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ErrPermissionDenied is what every refusal wraps, for errors.Is; a refusal also reads as a
// *protocol.Error with code PERMISSION_DENIED through errors.As, so the frontend's error
// table and protocol.CodeOf give it permission_denied.
var ErrPermissionDenied = errors.New("permission_denied")

// Operation names, as Error.Op and the Audit hook report them.
const (
	OpOpen    = "open"
	OpRead    = "read"
	OpWrite   = "write"
	OpMkdir   = "mkdir"
	OpRemove  = "remove"
	OpRename  = "rename"
	OpStat    = "stat"
	OpLstat   = "lstat"
	OpReadDir = "readdir"
)

// Error is a refused operation.
type Error struct {
	// Op is the operation (one of the Op constants).
	Op string
	// Path is the path as the caller gave it.
	Path string
	// Why says what was refused, for a person.
	Why string
	// Err is the underlying error that revealed the problem, if any (e.g. os.Root's own
	// refusal of a path that escapes).
	Err error
}

// Error renders `permission_denied: <op> "<path>": <why>`.
func (e *Error) Error() string {
	return "permission_denied: " + e.Op + " " + quote(e.Path) + ": " + e.Why
}

// Unwrap returns ErrPermissionDenied and the underlying error, if any.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrPermissionDenied}
	}
	return []error{ErrPermissionDenied, e.Err}
}

// As lets errors.As see a refusal as a *protocol.Error with code PERMISSION_DENIED.
func (e *Error) As(target any) bool {
	if p, ok := target.(**protocol.Error); ok {
		*p = protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s %s: %s", e.Op, quote(e.Path), e.Why)
		return true
	}
	return false
}

// AuditFunc receives every refusal: the operation, the path as the caller gave it, and the
// error returned (a *Error). It must not block for long; it is called on the caller's
// goroutine before the error is returned.
type AuditFunc func(op, path string, err error)

// Option configures a Root.
type Option func(*Root)

// WithAudit sets the hook told of every refusal (§19: refusals are security decisions and
// must be auditable).
func WithAudit(fn AuditFunc) Option { return func(r *Root) { r.audit = fn } }

// maxSymlinks bounds the links followed while resolving one path, as Linux's MAXSYMLINKS does.
const maxSymlinks = 40

// errLoop reports a path whose links do not end (too many to follow); it is no escape.
var errLoop = errors.New("too many levels of symbolic links")

// Root is an open worktree. Its methods take paths relative to the worktree, with "/" as the
// separator; an absolute path is accepted only when it lies under the worktree's directory
// (as given to Open, or with its links resolved), and is then taken relative to it. Methods
// are safe for concurrent use.
type Root struct {
	dir   string // the directory as given to Open, absolute and clean
	real  string // dir with its symbolic links resolved: where the worktree is
	root  *os.Root
	audit AuditFunc
}

// Open opens the worktree at dir. The directory's own path may go through symbolic links;
// they are resolved once, here. The filesystem root itself is refused.
func Open(dir string, opts ...Option) (*Root, error) {
	if dir == "" {
		return nil, errors.New("confine: the worktree directory is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("confine: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("confine: %w", err)
	}
	if real == string(filepath.Separator) || real == filepath.VolumeName(real)+string(filepath.Separator) {
		return nil, fmt.Errorf("confine: %s is the filesystem root, which confines nothing", abs)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("confine: %w", err)
	}
	r := &Root{dir: abs, real: real, root: root}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Dir is the worktree's directory, its symbolic links resolved.
func (r *Root) Dir() string { return r.real }

// Close releases the worktree's directory descriptor.
func (r *Root) Close() error { return r.root.Close() }

// ReadFile reads the regular file at name.
func (r *Root) ReadFile(name string) ([]byte, error) {
	f, err := r.open(OpRead, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// WriteFile writes data to the file at name, creating it with perm (before umask) or
// truncating it.
func (r *Root) WriteFile(name string, data []byte, perm fs.FileMode) error {
	f, err := r.open(OpWrite, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open opens the file or directory at name for reading.
func (r *Root) Open(name string) (*os.File, error) {
	return r.open(OpOpen, name, os.O_RDONLY, 0)
}

// OpenFile opens the file or directory at name with os.OpenFile's flags. A flag that may
// change the file (O_WRONLY, O_RDWR, O_CREATE, O_TRUNC, O_APPEND) makes it a write, refused
// under .git. Only regular files and directories are opened.
func (r *Root) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return r.open(OpOpen, name, flag, perm)
}

// ReadDir lists the directory at name, sorted by file name, as os.ReadDir does.
func (r *Root) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := r.open(OpReadDir, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// MkdirAll creates the directory at name and any missing parents, with perm (before umask).
func (r *Root) MkdirAll(name string, perm fs.FileMode) error {
	p, _, err := r.resolve(OpMkdir, name, true, true)
	if err != nil {
		return err
	}
	return r.mapErr(OpMkdir, name, r.root.MkdirAll(p, perm))
}

// Remove removes the file or empty directory at name. A symbolic link is removed itself,
// not its target (unless name ends in "/").
func (r *Root) Remove(name string) error {
	p, _, err := r.resolve(OpRemove, name, false, true)
	if err != nil {
		return err
	}
	return r.mapErr(OpRemove, name, r.root.Remove(p))
}

// Rename renames oldname to newname, replacing newname if it exists and the OS allows it.
// Symbolic links at either end are renamed or replaced themselves, not their targets.
func (r *Root) Rename(oldname, newname string) error {
	from, _, err := r.resolve(OpRename, oldname, false, true)
	if err != nil {
		return err
	}
	to, _, err := r.resolve(OpRename, newname, false, true)
	if err != nil {
		return err
	}
	return r.mapErr(OpRename, oldname, r.root.Rename(from, to))
}

// Stat describes the file at name, following symbolic links. It opens nothing, so it
// describes device nodes, FIFOs and sockets too (a caller can skip them).
func (r *Root) Stat(name string) (fs.FileInfo, error) {
	p, _, err := r.resolve(OpStat, name, true, false)
	if err != nil {
		return nil, err
	}
	fi, err := r.root.Stat(p)
	return fi, r.mapErr(OpStat, name, err)
}

// Lstat describes the file at name without following a final symbolic link.
func (r *Root) Lstat(name string) (fs.FileInfo, error) {
	p, _, err := r.resolve(OpLstat, name, false, false)
	if err != nil {
		return nil, err
	}
	fi, err := r.root.Lstat(p)
	return fi, r.mapErr(OpLstat, name, err)
}

// writeFlags are the open flags that may change a file.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

// open resolves name, refuses special files, and opens it.
func (r *Root) open(op, name string, flag int, perm fs.FileMode) (*os.File, error) {
	write := flag&writeFlags != 0
	p, before, err := r.resolve(op, name, true, write)
	if err != nil {
		return nil, err
	}
	if before != nil && !ordinary(before.Mode()) {
		return nil, r.refuse(op, name, kind(before.Mode())+" is not a regular file or directory", nil)
	}
	// Truncation waits until the file is known to be ordinary; O_NONBLOCK and O_NOCTTY keep
	// the open itself harmless if the path was swapped for a FIFO or a device meanwhile (a
	// FIFO's open would otherwise block until a writer came).
	f, err := r.root.OpenFile(p, (flag&^os.O_TRUNC)|openGuardFlags, perm)
	if err != nil {
		return nil, r.mapErr(op, name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !ordinary(fi.Mode()) {
		f.Close()
		return nil, r.refuse(op, name, kind(fi.Mode())+" is not a regular file or directory", nil)
	}
	if flag&os.O_TRUNC != 0 && fi.Mode().IsRegular() {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// resolve turns name into the worktree-relative path with no symbolic link in it (the last
// component is followed only when follow is set, or name ends in "/"), the §6.4 path
// canonicalization. It refuses NUL bytes, backslash traversal, absolute paths outside the
// worktree, ".." above the worktree, absolute link targets and, when write is set, any
// component named .git. It also returns what the last component is (nil when it does not
// exist or was not looked at).
func (r *Root) resolve(op, name string, follow, write bool) (string, fs.FileInfo, error) {
	if name == "" {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", nil, r.refuse(op, name, "the path contains a NUL byte", nil)
	}
	if strings.Contains(name, `\`) && slices.Contains(strings.FieldsFunc(name, isSlash), "..") {
		// On Linux "..\x" is an ordinary name, but a path meant as a Windows traversal is
		// refused rather than guessed at.
		return "", nil, r.refuse(op, name, `the path climbs with ".." between backslashes`, nil)
	}
	rel := name
	if filepath.IsAbs(name) {
		var ok bool
		if rel, ok = r.strip(name); !ok {
			return "", nil, r.refuse(op, name, "the absolute path is outside the worktree", nil)
		}
	}
	if strings.HasSuffix(rel, "/") || strings.HasSuffix(rel, "/.") || rel == "." {
		follow = true // "link/" names the link's target, as the kernel reads it
	}
	todo := split(rel)
	var done []string
	var last fs.FileInfo
	missing := false
	links := 0
	via := "" // the last symbolic link followed, to name in a refusal
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == ".." {
			if len(done) == 0 {
				why := "the path leaves the worktree"
				if via != "" {
					why += " through the symbolic link " + quote(via)
				}
				return "", nil, r.refuse(op, name, why, nil)
			}
			done = done[:len(done)-1]
			last = nil
			continue
		}
		if missing || (len(todo) == 0 && !follow) {
			// Nothing below a missing directory exists to be a link; a final component
			// that is not followed is taken as it is.
			done = append(done, c)
			last = nil
			continue
		}
		cur := path.Join(append(done, c)...)
		fi, err := r.root.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = true
			done = append(done, c)
			last = nil
			continue
		case err != nil:
			return "", nil, r.mapErr(op, name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			links++
			if links > maxSymlinks {
				return "", nil, &fs.PathError{Op: op, Path: name, Err: errLoop}
			}
			target, err := r.root.Readlink(cur)
			if err != nil {
				return "", nil, r.mapErr(op, name, err)
			}
			if target == "" || path.IsAbs(target) || filepath.IsAbs(target) {
				return "", nil, r.refuse(op, name, "the symbolic link "+quote(cur)+" has an absolute target", nil)
			}
			// The target is relative to the link's directory, which is done.
			todo = append(split(target), todo...)
			via = cur
			continue
		}
		if !fi.IsDir() && len(todo) > 0 {
			return "", nil, &fs.PathError{Op: op, Path: name, Err: errNotDir}
		}
		done = append(done, c)
		last = fi
	}
	if last != nil && !last.IsDir() && strings.HasSuffix(rel, "/") {
		return "", nil, &fs.PathError{Op: op, Path: name, Err: errNotDir}
	}
	if write {
		for _, c := range done {
			if strings.EqualFold(c, ".git") {
				return "", nil, r.refuse(op, name, "writes into .git are refused", nil)
			}
		}
	}
	if len(done) == 0 {
		return ".", last, nil
	}
	return path.Join(done...), last, nil
}

// strip takes an absolute path under the worktree's directory relative to it.
func (r *Root) strip(name string) (string, bool) {
	clean := filepath.Clean(name)
	for _, prefix := range []string{r.real, r.dir} {
		if clean == prefix {
			return ".", true
		}
		// The name, not its cleaned form, is what is kept: ".." in it is resolved like any
		// other, so "<dir>/../x" is refused rather than cleaned into something else.
		if rest, ok := strings.CutPrefix(name, prefix+string(filepath.Separator)); ok {
			if rest == "" {
				return ".", true
			}
			return filepath.ToSlash(rest), true
		}
	}
	return "", false
}

// refuse builds a refusal and tells the Audit hook of it.
func (r *Root) refuse(op, name, why string, cause error) error {
	err := &Error{Op: op, Path: name, Why: why, Err: cause}
	if r.audit != nil {
		r.audit(op, name, err)
	}
	return err
}

// mapErr turns os.Root's refusal of an escape — possible only when the tree changed between
// resolution and use — into a refusal; other errors pass unchanged.
func (r *Root) mapErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	var le *os.LinkError
	var inner error
	switch {
	case errors.As(err, &pe):
		inner = pe.Err
	case errors.As(err, &le):
		inner = le.Err
	}
	// os.Root's escape error is unexported; its text is the only handle on it.
	if inner != nil && inner.Error() == "path escapes from parent" {
		return r.refuse(op, name, "the path leaves the worktree", err)
	}
	return err
}

// ordinary reports whether a file may be opened: a regular file or a directory.
func ordinary(m fs.FileMode) bool { return m.IsRegular() || m.IsDir() }

// kind names a file type for a message.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file"
}

// split breaks a slash-separated path into its components, dropping empty ones and ".".
func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func isSlash(r rune) bool { return r == '/' || r == '\\' }

// quote prints a caller's path safely and briefly in a message.
func quote(s string) string {
	const limit = 200
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "…"
	}
	return strconv.Quote(s)
}
