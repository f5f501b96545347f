package app_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// hangingListener accepts connections and never answers them, so that anything dialling it
// (PostgreSQL, Temporal) hangs; it counts the connections it accepted.
func hangingListener(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted = new(atomic.Int32)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String(), accepted
}

// TestMalformedStructuredSettingFailsBeforeAnyConnection: a malformed structured setting
// stops Start at once, with an error naming its variable and flag, before the store is
// opened or Temporal dialled: both point at a listener that never answers, which would hold
// Start for as long as its context lives, and which sees no connection.
func TestMalformedStructuredSettingFailsBeforeAnyConnection(t *testing.T) {
	for _, tc := range []struct {
		env, flag string
		set       func(*app.Config)
	}{
		{"SW4RM_ROOM_STRATEGY", "--room-strategy", func(c *app.Config) { c.RoomStrategy = "confidence_weigted" }},
		{"SW4RM_HITL_OPERATORS", "--hitl-operators", func(c *app.Config) { c.HITLOperators = "alice" }},
		{"SW4RM_HITL_OPERATOR_KEYS", "--hitl-operator-keys", func(c *app.Config) {
			c.HITLOperators, c.HITLOperatorKeys = "alice=alice-token", "alice=not-a-key"
		}},
		{"SW4RM_MAX_PARALLEL", "--max-parallel", func(c *app.Config) { c.MaxParallel = "coder=two" }},
		{"SW4RM_INFERENCE_UNAVAILABLE", "--inference-unavailable", func(c *app.Config) { c.InferenceUnavailable = "maybe" }},
		{"SW4RM_MCP_SERVERS", "--mcp-servers", func(c *app.Config) { c.MCPServers = "fs" }},
		{"SW4RM_REPOS", "--repos", func(c *app.Config) { c.Repos = "app=relative/path" }},
		{"SW4RM_HANDOFF_COMPLETION_TIMEOUT", "--handoff-completion-timeout", func(c *app.Config) { c.HandoffCompletionTimeout = 31 * 24 * time.Hour }},
	} {
		t.Run(tc.env, func(t *testing.T) {
			addr, accepted := hangingListener(t)
			cfg := app.DefaultConfig()
			cfg.TemporalAddress = addr
			cfg.DatabaseURL = "postgres://sw4rm@" + addr + "/sw4rm?sslmode=disable"
			cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", ""
			tc.set(&cfg)

			_, err := cfg.Resolve()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.env+" ("+tc.flag+")")

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			began := time.Now()
			for _, roles := range []app.Roles{{Server: true}, {Worker: true}, {Server: true, Worker: true}} {
				_, err = app.Start(ctx, cfg, roles, slog.New(slog.DiscardHandler))
				require.Error(t, err, "%+v", roles)
				assert.Contains(t, err.Error(), tc.env+" ("+tc.flag+")", "%+v", roles)
			}
			assert.Less(t, time.Since(began), 5*time.Second, "refused at once, not after a connection attempt")
			assert.Zero(t, accepted.Load(), "nothing dialled the store or Temporal")
		})
	}
}

// TestResolve: the structured settings are parsed into the policies the process starts
// with.
func TestResolve(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.HITLOperators = "alice=alice-token"
	cfg.HITLExternal = "hitl:7070"
	cfg.RoomStrategy = "Borda_Count"
	cfg.MaxParallel = "coder=2,*=8"
	cfg.InferenceUnavailable = "hitl"
	cfg.ConflictThreshold = 0.4
	cfg.MCPServers = "web=http://tools:9000/mcp"
	cfg.Repos = "app=/srv/app"
	cfg.ToolPreApproved = "builtin/process.run, ci/*,"
	r, err := cfg.Resolve()
	require.NoError(t, err)
	assert.Equal(t, cfg, r.Config)
	require.Len(t, r.HITLPolicy.Operators, 1)
	assert.Equal(t, "hitl:7070", r.HITLPolicy.External)
	assert.Equal(t, "borda_count", string(r.RoomPolicy.Strategy))
	assert.Equal(t, map[string]int{"coder": 2, "*": 8}, r.AdmissionPolicy.MaxParallel)
	assert.Equal(t, "hitl", string(r.AdmissionPolicy.Unavailable))
	assert.InDelta(t, 0.4, r.AdmissionPolicy.ConflictThreshold, 1e-9)
	require.Len(t, r.MCPProviders, 1)
	assert.Equal(t, "web", r.MCPProviders[0].ID)
	assert.Equal(t, map[string]string{"app": "/srv/app"}, r.RepoPaths)
	assert.Equal(t, []string{"builtin/process.run", "ci/*"}, r.PreApprovedTools)

	r, err = app.DefaultConfig().Resolve()
	require.NoError(t, err)
	assert.Equal(t, "confidence_weighted", string(r.RoomPolicy.Strategy))
	assert.Equal(t, "serialize", string(r.AdmissionPolicy.Unavailable))
	assert.Empty(t, r.MCPProviders)
}
