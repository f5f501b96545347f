package app_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// TestCheckStore: one role alone needs PostgreSQL; both roles in one process may use memory.
func TestCheckStore(t *testing.T) {
	memory, pg := app.DefaultConfig(), app.DefaultConfig()
	pg.DatabaseURL = "postgres://db/sw4rm"
	server, worker, dev := app.Roles{Server: true}, app.Roles{Worker: true}, app.Roles{Server: true, Worker: true}
	assert.NoError(t, app.CheckStore(memory, dev))
	assert.NoError(t, app.CheckStore(pg, dev))
	assert.NoError(t, app.CheckStore(pg, server))
	assert.NoError(t, app.CheckStore(pg, worker))
	assert.ErrorContains(t, app.CheckStore(memory, server), "`sw4rm server` needs SW4RM_DATABASE_URL")
	assert.ErrorContains(t, app.CheckStore(memory, worker), "`sw4rm worker` needs SW4RM_DATABASE_URL")
}

// TestHITLDecisionKey: a server or worker alone with HITL operators needs the decision key
// file, and refuses to start without it, saying what to set; `sw4rm dev` generates a key; a
// role without operators needs none; a configured file is read in every role.
func TestHITLDecisionKey(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	server, worker, dev := app.Roles{Server: true}, app.Roles{Worker: true}, app.Roles{Server: true, Worker: true}
	withOps := app.DefaultConfig()
	withOps.HITLOperators = "alice=alice-token"

	for _, roles := range []app.Roles{server, worker} {
		err := app.CheckHITLKey(withOps, roles)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "SW4RM_HITL_DECISION_KEY_FILE")
		_, err = app.LoadHITLDecisionKey(withOps, roles, log)
		require.Error(t, err)
		key, err := app.LoadHITLDecisionKey(app.DefaultConfig(), roles, log)
		require.NoError(t, err, "no operators: nothing to sign or check")
		assert.Nil(t, key)
	}
	require.NoError(t, app.CheckHITLKey(withOps, dev))
	k1, err := app.LoadHITLDecisionKey(withOps, dev, log)
	require.NoError(t, err)
	k2, err := app.LoadHITLDecisionKey(withOps, dev, log)
	require.NoError(t, err)
	require.Len(t, k1, ed25519.PrivateKeySize)
	assert.False(t, k1.Equal(k2), "generated afresh, never a fixed key")

	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	withOps.HITLDecisionKeyFile = filepath.Join(t.TempDir(), "hitl-decision.key")
	require.NoError(t, os.WriteFile(withOps.HITLDecisionKeyFile, []byte(hex.EncodeToString(seed)+"\n"), 0o600))
	for _, roles := range []app.Roles{server, worker, dev} {
		require.NoError(t, app.CheckHITLKey(withOps, roles))
		key, err := app.LoadHITLDecisionKey(withOps, roles, log)
		require.NoError(t, err)
		assert.True(t, ed25519.NewKeyFromSeed(seed).Equal(key), "every role reads the same key")
	}
	require.NoError(t, os.WriteFile(withOps.HITLDecisionKeyFile, []byte("garbage"), 0o600))
	_, err = app.LoadHITLDecisionKey(withOps, dev, log)
	require.ErrorContains(t, err, "SW4RM_HITL_DECISION_KEY_FILE")
}

// TestHITLKeyVariables: the decision key file and the operators' keys are read from their
// variables.
func TestHITLKeyVariables(t *testing.T) {
	t.Setenv("SW4RM_HITL_DECISION_KEY_FILE", "/etc/sw4rm/hitl-decision.key")
	t.Setenv("SW4RM_HITL_OPERATOR_KEYS", "alice=AAAA")
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	assert.Equal(t, "/etc/sw4rm/hitl-decision.key", cfg.HITLDecisionKeyFile)
	assert.Equal(t, "alice=AAAA", cfg.HITLOperatorKeys)
}

// TestStartRefusesBadSecurityFiles: a half TLS configuration or an ACL file that does not
// load stop the process before it opens anything (nothing listens at the Temporal address,
// so only a refusal made first answers with these messages).
func TestStartRefusesBadSecurityFiles(t *testing.T) {
	dir := t.TempDir()
	badACL := filepath.Join(dir, "acl.json")
	require.NoError(t, os.WriteFile(badACL, []byte(`{"rules": [{"effect": "alow", "agents": ["*"], "send": ["DATA"]}]}`), 0o600))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dev := app.Roles{Server: true, Worker: true}
	for _, tc := range []struct {
		set  func(*app.Config)
		want []string
	}{
		{func(c *app.Config) { c.TLSCertFile = filepath.Join(dir, "cert.pem") }, []string{"SW4RM_TLS_CERT_FILE", "set both files"}},
		{func(c *app.Config) { c.TLSKeyFile = filepath.Join(dir, "key.pem") }, []string{"SW4RM_TLS_KEY_FILE", "set both files"}},
		{func(c *app.Config) {
			c.TLSCertFile, c.TLSKeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		}, []string{"SW4RM_TLS_CERT_FILE", "cert.pem"}},
		{func(c *app.Config) { c.ACLFile = badACL }, []string{"SW4RM_ACL_FILE", badACL, `effect "alow"`}},
		{func(c *app.Config) { c.ACLFile = filepath.Join(dir, "missing.json") }, []string{"SW4RM_ACL_FILE", "missing.json"}},
	} {
		cfg := app.DefaultConfig()
		cfg.TemporalAddress = "127.0.0.1:1"
		tc.set(&cfg)
		_, err := app.Start(context.Background(), cfg, dev, log)
		require.Error(t, err)
		for _, w := range tc.want {
			assert.Contains(t, err.Error(), w)
		}
	}
}

// TestLoadACL: no file, no policy (everything allowed); a file, its policy.
func TestLoadACL(t *testing.T) {
	p, err := app.LoadACL(app.DefaultConfig())
	require.NoError(t, err)
	assert.Nil(t, p)
	cfg := app.DefaultConfig()
	cfg.ACLFile = filepath.Join("..", "examples", "acl.json")
	p, err = app.LoadACL(cfg)
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.NotEmpty(t, p.Rules)
}

// TestSecurityFromEnv: the TLS and ACL files come from their SW4RM_* variables.
func TestSecurityFromEnv(t *testing.T) {
	t.Setenv("SW4RM_TLS_CERT_FILE", "/etc/sw4rm/tls.crt")
	t.Setenv("SW4RM_TLS_KEY_FILE", "/etc/sw4rm/tls.key")
	t.Setenv("SW4RM_TLS_CLIENT_CA_FILE", "/etc/sw4rm/clients.pem")
	t.Setenv("SW4RM_ACL_FILE", "/etc/sw4rm/acl.json")
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	assert.Equal(t, "/etc/sw4rm/tls.crt", cfg.TLSCertFile)
	assert.Equal(t, "/etc/sw4rm/tls.key", cfg.TLSKeyFile)
	assert.Equal(t, "/etc/sw4rm/clients.pem", cfg.TLSClientCAFile)
	assert.Equal(t, "/etc/sw4rm/acl.json", cfg.ACLFile)
}

// TestReasoningExternalFromEnv: the external reasoning engine comes from
// SW4RM_REASONING_EXTERNAL; without it the builtin engine answers.
func TestReasoningExternalFromEnv(t *testing.T) {
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	assert.Empty(t, cfg.ReasoningExternal, "the builtin engine by default")
	t.Setenv("SW4RM_REASONING_EXTERNAL", "reasoner:7000")
	cfg, err = app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	assert.Equal(t, "reasoner:7000", cfg.ReasoningExternal)
}

// TestOpenRepos: SW4RM_REPOS must name git repositories by absolute path; none is fine.
func TestOpenRepos(t *testing.T) {
	m, err := app.OpenRepos(t.Context(), app.DefaultConfig())
	require.NoError(t, err)
	assert.Empty(t, m.RepoIDs())
	cfg := app.DefaultConfig()
	cfg.Repos = "app=relative"
	_, err = app.OpenRepos(t.Context(), cfg)
	require.ErrorContains(t, err, "SW4RM_REPOS")
	cfg.Repos = "app=" + t.TempDir()
	_, err = app.OpenRepos(t.Context(), cfg)
	require.ErrorContains(t, err, "not a git repository")
}
