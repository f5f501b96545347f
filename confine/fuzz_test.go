//go:build linux

package confine_test

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzStaysInside throws arbitrary paths at reads and writes: whatever succeeds must never
// have read a file outside the worktree, and nothing outside it or in .git may change.
// {wt} and {base} in an input stand for the absolute paths, so the fuzzer can build absolute
// forms too.
func FuzzStaysInside(f *testing.F) {
	for _, seed := range []string{
		"../outside/secret", "a/../../outside/secret", "{wt}/../outside/secret", "{wt}x/secret",
		"{base}/outside/secret", "/proc/self/root{wt}/plain", "esc_rel", "esc_dir/x", "chain1",
		"deep/esc/secret", "git_link/config", ".git/config", "mod/.git", "fifo", "sock",
		`..\outside\secret`, "in_dir/../../docs/readme.md", "docs_link/..", "plain\x00x", "esc_dir/",
		"in_rel", "{wt}/a/b/file.txt", "proc_link/etc/passwd", ".GIT/x",
	} {
		f.Add(seed)
	}
	tr := newTree(f)
	r := openRoot(f, tr.wt)
	// A fuzzed rename may move mod/ and its .git with it, which is allowed; the worktree's
	// own .git and everything outside may not change.
	watched := []string{"outside", "wtx", "wt/.git"}
	before := tr.snapshot(f, watched...)
	// What no open may reach, by identity rather than by name: the fuzzer may well create a
	// "secret" of its own inside the worktree.
	var outside []os.FileInfo
	for _, p := range []string{tr.base, "outside", "outside/secret", "outside/dir", "outside/dir/x", "wtx", "wtx/secret", "/", "/etc", "/etc/passwd"} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(tr.base, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			f.Fatal(err)
		}
		outside = append(outside, fi)
	}

	f.Fuzz(func(t *testing.T, p string) {
		p = tr.expand(p)
		if fh, err := r.Open(p); err == nil {
			fi, err := fh.Stat()
			fh.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range outside {
				if os.SameFile(fi, o) {
					t.Fatalf("Open(%q) opened %s, outside the worktree", p, o.Name())
				}
			}
		}
		_ = r.WriteFile(p, []byte("FUZZ"), 0o644)
		_ = r.MkdirAll(p+"/d", 0o755)
		_ = r.Rename(p, "fuzz-moved")
		_ = r.Remove(p)
		after := tr.snapshot(t, watched...)
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("%q changed %s from %q to %q", p, k, v, after[k])
			}
		}
		for k := range after {
			if _, ok := before[k]; !ok {
				t.Fatalf("%q created %s", p, k)
			}
		}
		if _, err := os.Stat(filepath.Join(tr.wt, ".git", "HEAD")); err != nil {
			t.Fatalf("%q: the worktree's .git is damaged: %v", p, err)
		}
	})
}
