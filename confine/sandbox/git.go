package sandbox

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GitPaths are the parts of the repository git needs to work in the worktree wt, split
// into what it may write and what it may only read:
//
//   - a linked worktree (its .git is a file "gitdir: <repo>/.git/worktrees/<name>"): that
//     directory — this worktree's HEAD, index and logs — read-write; of the repository's
//     common directory (named by its commondir file) only what every worktree shares and
//     git reads: objects, refs, packed-refs, config, info, shallow, and the main HEAD,
//     read-only. Hooks, other worktrees' directories and the main working tree are not
//     granted; nothing of the common directory is writable, so a process can neither
//     change the repository's configuration (core.hooksPath, core.fsmonitor would run code
//     in the server's own git commands) nor move a branch;
//   - a worktree whose .git is a directory (a clone): inside the worktree already.
//
// So `git status`, `git diff` and `git log` work; `git commit` and `git add`, which write
// the shared object store, are refused.
func GitPaths(wt string) (rw, ro []string) {
	b, err := os.ReadFile(filepath.Join(wt, ".git"))
	if err != nil {
		return nil, nil // a directory, or none: nothing outside the worktree
	}
	line, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return nil, nil
	}
	gitdir := strings.TrimSpace(line)
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(wt, gitdir)
	}
	gitdir = filepath.Clean(gitdir)
	rw = append(rw, gitdir)
	common := gitdir
	if c, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common = strings.TrimSpace(string(c))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		common = filepath.Clean(common)
	}
	if common == gitdir {
		return rw, nil
	}
	for _, name := range []string{"objects", "refs", "packed-refs", "config", "info", "shallow", "HEAD", "commondir"} {
		p := filepath.Join(common, name)
		if _, err := os.Lstat(p); err == nil {
			ro = append(ro, p)
		}
	}
	return rw, ro
}

// interpreter is the absolute path of the interpreter a script's "#!" line names
// ("#!/usr/bin/env node": node as found on PATH), or "" for a binary or an unknown one.
func interpreter(script string) string {
	if script == "" {
		return ""
	}
	f, err := os.Open(script)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return ""
	}
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	prog := fields[0]
	if filepath.Base(prog) == "env" {
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "-") {
				prog = f
				break
			}
		}
	}
	if !filepath.IsAbs(prog) {
		p, err := exec.LookPath(prog)
		if err != nil {
			return ""
		}
		prog = p
	}
	return realPath(prog)
}
