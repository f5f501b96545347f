package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// run executes the sw4rm command line with args and returns its error and what it wrote to
// stderr (the log).
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestSplitRolesRefuseTheMemoryStore: `sw4rm server` and `sw4rm worker` without
// SW4RM_DATABASE_URL refuse to start, before they contact Temporal, and say why and what to
// do instead: each would otherwise keep a memory store of its own and silently disagree.
func TestSplitRolesRefuseTheMemoryStore(t *testing.T) {
	t.Setenv("SW4RM_DATABASE_URL", "")
	for _, role := range []string{"server", "worker"} {
		// Nothing listens on port 1: only a refusal before dialling Temporal answers quickly
		// with the store's reason.
		_, err := run(t, role, "--temporal-address", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0", "--http-addr", "")
		require.Error(t, err, role)
		assert.Contains(t, err.Error(), "`sw4rm "+role+"` needs SW4RM_DATABASE_URL", role)
		assert.Contains(t, err.Error(), "memory store of its own", role)
		assert.Contains(t, err.Error(), "`sw4rm dev`", role)
	}
}

// TestSplitRolesRefuseOperatorsWithoutDecisionKey: a server or worker alone with HITL
// operators but no decision key refuses to start, before it contacts Temporal, and names
// the setting; `sw4rm dev` generates its own (app.LoadHITLDecisionKey).
func TestSplitRolesRefuseOperatorsWithoutDecisionKey(t *testing.T) {
	t.Setenv("SW4RM_DATABASE_URL", "postgres://127.0.0.1:1/sw4rm")
	t.Setenv("SW4RM_HITL_OPERATORS", "alice=alice-token")
	unsetenv(t, "SW4RM_HITL_DECISION_KEY_FILE")
	for _, role := range []string{"server", "worker"} {
		_, err := run(t, role, "--temporal-address", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0", "--http-addr", "")
		require.Error(t, err, role)
		assert.Contains(t, err.Error(), "`sw4rm "+role+"` has HITL operators", role)
		assert.Contains(t, err.Error(), "SW4RM_HITL_DECISION_KEY_FILE", role)
	}
	cfg, _, _ := configOf(t, "server", "--hitl-decision-key-file", "/run/secrets/hitl.key", "--hitl-operator-keys", "alice=AAAA")
	assert.Equal(t, "/run/secrets/hitl.key", cfg.HITLDecisionKeyFile)
	assert.Equal(t, "alice=AAAA", cfg.HITLOperatorKeys)
}

// configOf runs the sw4rm command line with args up to the start of its roles and returns the
// configuration and roles it would start with, and what it logged before.
func configOf(t *testing.T, args ...string) (app.Config, app.Roles, string) {
	t.Helper()
	errStarted := errors.New("started")
	var (
		cfg   app.Config
		roles app.Roles
	)
	root := newRootWith(func(_ context.Context, c app.Config, r app.Roles, _ *slog.Logger) (*app.App, error) {
		cfg, roles = c, r
		return nil, errStarted
	})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	require.ErrorIs(t, root.Execute(), errStarted)
	return cfg, roles, out.String()
}

// unsetenv removes a variable for the test, restoring it after.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	require.NoError(t, os.Unsetenv(name))
}

// TestDevConfiguresTheDevOperator: `sw4rm dev` run on its own behaves like `make dev`: with
// no HITL operator configured it gets the dev operator, and says so in its log, so HITL
// waits can be decided instead of all falling back at once. Operators set on purpose — by
// variable, even to empty, or by flag — an external HITL component, and the other roles are
// left alone.
func TestDevConfiguresTheDevOperator(t *testing.T) {
	unsetenv(t, "SW4RM_HITL_OPERATORS")
	unsetenv(t, "SW4RM_HITL_EXTERNAL")
	t.Setenv("SW4RM_DATABASE_URL", "")

	cfg, roles, log := configOf(t, "dev")
	assert.Equal(t, app.Roles{Server: true, Worker: true}, roles)
	assert.Equal(t, app.DevHITLOperators, cfg.HITLOperators)
	assert.Contains(t, log, "dev role: one HITL operator configured by default")
	assert.Contains(t, log, "operator=dev token=sw4rm-dev-token")

	cfg, _, log = configOf(t, "dev", "--hitl-operators", "bob=bob-token")
	assert.Equal(t, "bob=bob-token", cfg.HITLOperators)
	assert.NotContains(t, log, "by default")
	cfg, _, _ = configOf(t, "dev", "--hitl-external", "127.0.0.1:7070")
	assert.Empty(t, cfg.HITLOperators, "an external HITL component decides")

	t.Setenv("SW4RM_HITL_OPERATORS", "alice=alice-token")
	cfg, _, _ = configOf(t, "dev")
	assert.Equal(t, "alice=alice-token", cfg.HITLOperators)
	t.Setenv("SW4RM_HITL_OPERATORS", "")
	cfg, _, log = configOf(t, "dev")
	assert.Empty(t, cfg.HITLOperators, "set to empty on purpose: no operator")
	assert.NotContains(t, log, "by default")

	unsetenv(t, "SW4RM_HITL_OPERATORS")
	t.Setenv("SW4RM_DATABASE_URL", "postgres://db/sw4rm")
	for _, role := range []string{"server", "worker"} {
		cfg, _, _ = configOf(t, role)
		assert.Empty(t, cfg.HITLOperators, role)
	}
}

// TestEveryDocumentedVariableIsRead: a setting that has a SW4RM_* variable but no flag still
// reaches the configuration (they were read by app.Config.FromEnv and then dropped), and a
// flag set on the command line wins over its variable.
func TestEveryDocumentedVariableIsRead(t *testing.T) {
	t.Setenv("SW4RM_DATABASE_URL", "")
	t.Setenv("SW4RM_MAX_PARALLEL", "coder=2,*=8")
	t.Setenv("SW4RM_CONFLICT_THRESHOLD", "0.4")
	t.Setenv("SW4RM_INFERENCE_UNAVAILABLE", "allow")
	t.Setenv("SW4RM_PREEMPT_TIMEOUT", "45s")
	t.Setenv("SW4RM_TERMINATE_GRACE", "7s")
	t.Setenv("SW4RM_ACK_TIMEOUT", "20s")
	t.Setenv("SW4RM_REASONING_EXTERNAL", "env-reasoner:7000")
	cfg, _, _ := configOf(t, "dev", "--ack-timeout", "15s")
	assert.Equal(t, "env-reasoner:7000", cfg.ReasoningExternal)
	assert.Equal(t, "coder=2,*=8", cfg.MaxParallel)
	assert.InDelta(t, 0.4, cfg.ConflictThreshold, 1e-9)
	assert.Equal(t, "allow", cfg.InferenceUnavailable)
	assert.Equal(t, 45*time.Second, cfg.PreemptTimeout)
	assert.Equal(t, 7*time.Second, cfg.TerminateGrace)
	assert.Equal(t, 15*time.Second, cfg.AckTimeout, "the flag wins over its variable")
	cfg, _, _ = configOf(t, "dev")
	assert.Equal(t, 20*time.Second, cfg.AckTimeout, "the variable wins over the default")
	cfg, _, _ = configOf(t, "worker", "--reasoning-external", "flag-reasoner:7000")
	assert.Equal(t, "flag-reasoner:7000", cfg.ReasoningExternal, "the flag wins over its variable")
	t.Setenv("SW4RM_MCP_SERVERS", "fs=stdio:fs-server /srv")
	cfg, _, _ = configOf(t, "server")
	assert.Equal(t, "fs=stdio:fs-server /srv", cfg.MCPServers)
	cfg, _, _ = configOf(t, "server", "--mcp-servers", "web=http://tools:9000/mcp")
	assert.Equal(t, "web=http://tools:9000/mcp", cfg.MCPServers, "the flag wins over its variable")

	t.Setenv("SW4RM_REPOS", "app=/srv/app")
	t.Setenv("SW4RM_WORKTREE_ROOT", "/srv/worktrees")
	cfg, _, _ = configOf(t, "dev")
	assert.Equal(t, "app=/srv/app", cfg.Repos)
	assert.Equal(t, "/srv/worktrees", cfg.WorktreeRoot)
	cfg, _, _ = configOf(t, "worker", "--repos", "docs=/srv/docs", "--worktree-root", "/tmp/wt")
	assert.Equal(t, "docs=/srv/docs", cfg.Repos, "the flag wins over its variable")
	assert.Equal(t, "/tmp/wt", cfg.WorktreeRoot)
}

// TestSecuritySettings: the TLS and ACL files come from their variables or flags, the flag
// winning; a half TLS configuration or a bad ACL file stops the process with a message that
// names the setting, before it contacts Temporal.
func TestSecuritySettings(t *testing.T) {
	t.Setenv("SW4RM_DATABASE_URL", "")
	t.Setenv("SW4RM_TLS_CERT_FILE", "/env/tls.crt")
	t.Setenv("SW4RM_TLS_KEY_FILE", "/env/tls.key")
	t.Setenv("SW4RM_TLS_CLIENT_CA_FILE", "/env/clients.pem")
	t.Setenv("SW4RM_ACL_FILE", "/env/acl.json")
	cfg, _, _ := configOf(t, "dev")
	assert.Equal(t, "/env/tls.crt", cfg.TLSCertFile)
	assert.Equal(t, "/env/tls.key", cfg.TLSKeyFile)
	assert.Equal(t, "/env/clients.pem", cfg.TLSClientCAFile)
	assert.Equal(t, "/env/acl.json", cfg.ACLFile)
	cfg, _, _ = configOf(t, "server", "--tls-cert-file", "/flag/tls.crt", "--tls-key-file", "/flag/tls.key",
		"--tls-client-ca-file", "", "--acl-file", "/flag/acl.json")
	assert.Equal(t, "/flag/tls.crt", cfg.TLSCertFile)
	assert.Equal(t, "/flag/tls.key", cfg.TLSKeyFile)
	assert.Empty(t, cfg.TLSClientCAFile)
	assert.Equal(t, "/flag/acl.json", cfg.ACLFile)

	for _, name := range []string{"SW4RM_TLS_CERT_FILE", "SW4RM_TLS_KEY_FILE", "SW4RM_TLS_CLIENT_CA_FILE", "SW4RM_ACL_FILE"} {
		unsetenv(t, name)
	}
	base := []string{"dev", "--temporal-address", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0", "--http-addr", ""}
	_, err := run(t, append(base, "--tls-cert-file", "/flag/tls.crt")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SW4RM_TLS_KEY_FILE")
	assert.Contains(t, err.Error(), "set both files")
	_, err = run(t, append(base, "--acl-file", "/nonexistent/acl.json")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SW4RM_ACL_FILE")
	assert.Contains(t, err.Error(), "/nonexistent/acl.json")
}
