package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain keeps the tests' dev token files out of the user's cache directory: `sw4rm dev`
// run by configOf writes one.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sw4rm-cli-test-")
	if err != nil {
		panic(err)
	}
	userCacheDir = func() (string, error) { return dir, nil }
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// withCacheDir points the token file at a fresh directory for one test.
func withCacheDir(t *testing.T) string {
	dir := t.TempDir()
	prev := userCacheDir
	userCacheDir = func() (string, error) { return dir, nil }
	t.Cleanup(func() { userCacheDir = prev })
	return filepath.Join(dir, "sw4rm", devTokenName)
}

// TestDevTokenFile: `sw4rm dev` with the default operator leaves its token in a file only
// the user reads; with operators of its own it removes the file.
func TestDevTokenFile(t *testing.T) {
	path := withCacheDir(t)
	unsetenv(t, "SW4RM_HITL_OPERATORS")
	unsetenv(t, "SW4RM_HITL_EXTERNAL")
	t.Setenv("SW4RM_DATABASE_URL", "")

	_, _, log := configOf(t, "dev")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "sw4rm-dev-token\n", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	assert.Contains(t, log, "finds the dev operator's token itself")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left beside it")

	_, _, _ = configOf(t, "dev", "--hitl-operators", "bob=bob-token")
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "a server without the default operator does not know its token")
	_, _, _ = configOf(t, "dev", "--hitl-operators", "bob=bob-token")
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "removing a file that is not there is no failure")
}

// TestDevTokenUnwritable: a token file that cannot be written costs the convenience only,
// with a warning.
func TestDevTokenUnwritable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sw4rm"), nil, 0o600)) // a file where the directory goes
	prev := userCacheDir
	userCacheDir = func() (string, error) { return dir, nil }
	t.Cleanup(func() { userCacheDir = prev })
	var out bytes.Buffer
	saveDevToken("tok", slog.New(slog.NewTextHandler(&out, nil)))
	assert.Contains(t, out.String(), "level=WARN")
	assert.Contains(t, out.String(), "pass --token or set SW4RM_OPERATOR_TOKEN")
}

// TestDevTokenOnlyForLoopback: the CLI offers the dev token only to a server on this
// machine, and only when the file is there.
func TestDevTokenOnlyForLoopback(t *testing.T) {
	path := withCacheDir(t)
	assert.Empty(t, devToken("localhost:50051"), "no file, no token")
	require.NoError(t, writePrivate(path, []byte("sw4rm-dev-token\n")))
	for _, addr := range []string{"localhost:50051", "LOCALHOST:1", "127.0.0.1:50051", "127.3.2.1:9", "[::1]:50051", ":50051", "dns:///localhost:50051", "passthrough:///127.0.0.1:1"} {
		assert.Equal(t, "sw4rm-dev-token", devToken(addr), addr)
	}
	for _, addr := range []string{"sw4rm.example.com:443", "10.0.0.5:50051", "[2001:db8::1]:50051", "localhost", "unix:///tmp/sock", "dns:///sw4rm:50051"} {
		assert.Empty(t, devToken(addr), addr)
	}
}
