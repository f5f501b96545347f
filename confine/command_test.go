//go:build linux

package confine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/confine"
)

func TestCommandRunsInTheWorktree(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	t.Setenv("SW4RM_SECRET_TOKEN", "must-not-leak")

	out, err := confine.Command(context.Background(), r, "sh", "-c", "pwd; env").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.Equal(t, tr.wt, lines[0])
	env := lines[1:]
	slices.Sort(env)
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	// sh itself may add SHLVL and "_"; nothing else beyond Env's own may appear.
	names = slices.DeleteFunc(names, func(k string) bool { return k == "SHLVL" || k == "_" })
	assert.Equal(t, []string{"GIT_CEILING_DIRECTORIES", "HOME", "LANG", "PATH", "PWD"}, names)
	assert.Contains(t, env, "HOME="+tr.wt)
	assert.Contains(t, env, "GIT_CEILING_DIRECTORIES="+tr.base)
	assert.NotContains(t, string(out), "must-not-leak")

	// A name with a slash is relative to the worktree.
	require.NoError(t, os.WriteFile(filepath.Join(tr.wt, "hello.sh"), []byte("#!/bin/sh\necho hello from $(pwd)\n"), 0o755))
	out, err = confine.Command(context.Background(), r, "./hello.sh").Output()
	require.NoError(t, err)
	assert.Equal(t, "hello from "+tr.wt+"\n", string(out))
}

// TestCommandCancelKillsTheGroup checks that ending the context kills what the command
// spawned too, not only the command.
func TestCommandCancelKillsTheGroup(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := confine.Command(ctx, r, "sh", "-c", "sleep 300 & echo $! > child.pid; wait")
	require.NoError(t, cmd.Start())
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(tr.wt, "child.pid"))
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.Error(t, cmd.Wait())
	// The grandchild is gone, or a zombie waiting for its new parent to reap it.
	require.Eventually(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		return strings.HasPrefix(rest, "Z")
	}, 10*time.Second, 10*time.Millisecond, "the sleep the command spawned was killed with it")
}
