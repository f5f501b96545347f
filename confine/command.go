package confine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
)

// DefaultPath is the child's PATH when the server's own is empty.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// Env is the whole environment of a process started in the worktree, and nothing of the
// server's besides PATH — no credentials, database URLs or tokens reach the child:
//
//   - PATH: the server's (DefaultPath if it has none), so that the child finds the same
//     programs that exec found it by;
//   - HOME and PWD: the worktree, so that tools write their caches and dotfiles there
//     rather than in the server's home;
//   - LANG=C.UTF-8, so that output does not depend on the server's locale;
//   - GIT_CEILING_DIRECTORIES: the worktree's parent, so that git run there never climbs
//     out to a repository above the worktree if the worktree's .git is missing.
//
// A provider that needs more appends to the command's Env.
func (r *Root) Env() []string {
	p := os.Getenv("PATH")
	if p == "" {
		p = DefaultPath
	}
	return []string{
		"PATH=" + p,
		"HOME=" + r.real,
		"PWD=" + r.real,
		"LANG=C.UTF-8",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(r.real),
	}
}

// Command returns the command to run name with args in the worktree r, for providers that
// spawn processes (§6.4 "process spawning"): its directory is the worktree, its environment
// is r.Env(), and on Unix it runs in a process group of its own that the context's end kills
// as a whole. name is looked up as exec.Command looks it up; a name with a slash is relative
// to the worktree.
//
// The process is confined by nothing else: it may open any path the server's user may open.
// Confining it takes the operating-system means that docs/worktrees.md lists.
func Command(ctx context.Context, r *Root, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.real
	cmd.Env = r.Env()
	ownProcessGroup(cmd)
	return cmd
}
