package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// TestREADMESettingsTable: README.md's settings table is the one the settings table
// generates, so the documentation cannot drift from the flags and variables.
func TestREADMESettingsTable(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	readme, err := os.ReadFile(path)
	require.NoError(t, err)
	want, err := withSettingsTable(string(readme))
	require.NoError(t, err)
	if want != string(readme) {
		t.Fatalf("README.md's settings table differs from app's settings table; run `go run ./cmd/sw4rm settings --readme README.md`")
	}
}

// TestSettingsCommand: the hidden settings command prints the README's table, and lists
// every setting with its flag and default.
func TestSettingsCommand(t *testing.T) {
	out, _, err := runOut(t, "settings", "--markdown")
	require.NoError(t, err)
	assert.Equal(t, app.SettingsMarkdown(), out)
	out, _, err = runOut(t, "settings")
	require.NoError(t, err)
	for _, s := range app.Settings() {
		assert.Contains(t, out, s.Env)
		assert.Contains(t, out, "--"+s.Flag)
	}
	assert.Regexp(t, `SW4RM_ACK_TIMEOUT\s+--ack-timeout\s+10s`, out)

	// --names: the variables alone, one a line, in the table's order (deploy/check reads it).
	out, _, err = runOut(t, "settings", "--names")
	require.NoError(t, err)
	var names []string
	for _, s := range app.Settings() {
		names = append(names, s.Env)
	}
	assert.Equal(t, strings.Join(names, "\n")+"\n", out)

	readme := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(readme, []byte("# x\n\n"+settingsBegin+"\nstale\n"+settingsEnd+"\n\nafter\n"), 0o600))
	_, _, err = runOut(t, "settings", "--readme", readme)
	require.NoError(t, err)
	got, err := os.ReadFile(readme)
	require.NoError(t, err)
	assert.Equal(t, "# x\n\n"+settingsBegin+"\n"+app.SettingsMarkdown()+settingsEnd+"\n\nafter\n", string(got))
}

// TestMalformedStructuredSettingStopsAtOnce: a typo in a structured setting, by variable or
// by flag, stops `sw4rm server`, `worker` and `dev` before they contact the store or
// Temporal (which point at a listener that never answers), naming the setting.
func TestMalformedStructuredSettingStopsAtOnce(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	hang := lis.Addr().String()
	t.Setenv("SW4RM_DATABASE_URL", "postgres://sw4rm@"+hang+"/sw4rm?sslmode=disable")
	t.Setenv("SW4RM_TEMPORAL_ADDRESS", hang)
	began := time.Now()
	for _, role := range []string{"server", "worker", "dev"} {
		t.Setenv("SW4RM_ROOM_STRATEGY", "confidence_weigted")
		_, err := run(t, role, "--grpc-addr", "127.0.0.1:0", "--http-addr", "")
		require.Error(t, err, role)
		assert.Contains(t, err.Error(), "SW4RM_ROOM_STRATEGY (--room-strategy)", role)
		unsetenv(t, "SW4RM_ROOM_STRATEGY")
		_, err = run(t, role, "--grpc-addr", "127.0.0.1:0", "--http-addr", "", "--max-parallel", "coder")
		require.Error(t, err, role)
		assert.Contains(t, err.Error(), "SW4RM_MAX_PARALLEL (--max-parallel)", role)
	}
	assert.Less(t, time.Since(began), 5*time.Second, "refused at once")
}
