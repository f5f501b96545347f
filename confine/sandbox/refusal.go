package sandbox

import (
	"fmt"
	"strings"
)

// Refusal says what a confined program that failed ran into, "" when nothing says it ran
// into the sandbox: the process limit (the cgroup's count of refused forks, or the shell's
// "fork" complaint), the file size limit (it was killed by SIGXFSZ, or reports "File too
// large"), the memory limit ("out of memory", "Cannot allocate memory"), the open-file
// limit ("Too many open files"), or the filesystem confinement ("Permission denied",
// "Operation not permitted", "Read-only file system", and "Invalid cross-device link",
// Landlock's answer to a link or a move that would widen a file's access). Only the cgroup
// count is the kernel's own word; the rest is the program's report of the errno the kernel
// gave it, read from the end of its standard error — how a refusal shows, since the kernel
// tells the program, not the provider. The provider maps a refusal to PERMISSION_DENIED.
func (r *Run) Refusal(fileSizeSignal bool, stderrTail string) string {
	l := r.Spec.Limits
	switch {
	case r.ProcsLimitReached() || containsAny(stderrTail, "fork: Resource temporarily unavailable", "fork: retry", "Cannot fork", "can't fork"):
		return fmt.Sprintf("the process limit (%d processes, SW4RM_TOOL_MAX_PROCS) was reached", l.Procs)
	case fileSizeSignal || containsAny(stderrTail, "File too large", "File size limit exceeded"):
		return fmt.Sprintf("the file size limit (%d bytes, SW4RM_TOOL_MAX_FILE_BYTES) was reached", l.FileBytes)
	case containsAny(stderrTail, "Too many open files"):
		return fmt.Sprintf("the open-file limit (%d, SW4RM_TOOL_MAX_OPEN_FILES) was reached", l.OpenFiles)
	case containsAny(stderrTail, "out of memory", "Cannot allocate memory", "cannot allocate memory", "MemoryError"):
		return fmt.Sprintf("the memory limit (%d bytes of address space, SW4RM_TOOL_MAX_MEMORY_BYTES) was reached", l.MemoryBytes)
	case containsAny(stderrTail, "Permission denied", "Operation not permitted", "Read-only file system", "Invalid cross-device link"):
		return "the sandbox refused an access: a process may write only its worktree and $TMPDIR, and read only the system paths and SW4RM_TOOL_READ_PATHS (docs/tools.md)"
	}
	return ""
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
