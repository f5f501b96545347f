package app_test

import (
	"context"
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
