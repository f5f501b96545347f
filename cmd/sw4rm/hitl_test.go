package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
)

// runSplit executes the command line and returns stdout and stderr apart.
func runSplit(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.Execute()
	return stdout.String(), stderr.String(), err
}

// operatorKeyFile writes an operator's key file as `sw4rm keys generate` does: the seed in
// hex on one line.
func operatorKeyFile(t *testing.T) (string, ed25519.PrivateKey) {
	t.Helper()
	seed := bytes.Repeat([]byte{5}, ed25519.SeedSize)
	p := filepath.Join(t.TempDir(), "alice.key")
	require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString(seed)+"\n"), 0o600))
	return p, ed25519.NewKeyFromSeed(seed)
}

// TestHitlSignPrintsASignedDecision: `sw4rm hitl sign` prints the decision JSON for the raw
// signal door — no token, signed by the operator's key, expiring after --ttl — and on stderr
// the command that sends it; with the operator's entry that `sw4rm hitl operator-key` prints
// configured, the workflow's check accepts it.
func TestHitlSignPrintsASignedDecision(t *testing.T) {
	keyFile, key := operatorKeyFile(t)
	out, hint, err := runSplit(t, "hitl", "sign", "--key", keyFile, "--operator", "alice", "--invocation", "3f0c-1",
		"--decision", "Approve", "--rationale", "scoped to one tenant", "--ttl", "5m")
	require.NoError(t, err, hint)
	assert.NotContains(t, out, "token")
	var d hitl.Decision
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, hitl.Approve, d.Decision)
	assert.Equal(t, "alice", d.Operator)
	assert.Equal(t, "signal", d.Via)
	require.NotNil(t, d.Attestation)
	assert.WithinDuration(t, time.Now().Add(5*time.Minute), time.UnixMilli(d.Attestation.ExpiresAt), time.Minute)
	assert.Contains(t, hint, "temporal workflow signal --workflow-id hitl/3f0c-1 --name "+hitl.DecisionSignal)

	entry, _, err := runSplit(t, "hitl", "operator-key", "--key", keyFile, "--operator", "alice")
	require.NoError(t, err)
	ops, err := hitl.ParseOperators("alice=alice-token")
	require.NoError(t, err)
	ops, err = hitl.ParseOperatorKeys(ops, strings.TrimSpace(entry))
	require.NoError(t, err)
	require.Len(t, ops[0].PublicKeys, 1)
	assert.True(t, ops[0].PublicKeys[0].Equal(key.Public()))
	policy := hitl.Policy{Operators: ops}
	_, err = policy.Authorize(d, "SECURITY_APPROVAL", time.Now())
	require.NoError(t, err, "the workflow accepts it")
	_, err = policy.Authorize(d, "SECURITY_APPROVAL", time.Now().Add(6*time.Minute))
	require.ErrorContains(t, err, "expired")
}

// TestHitlSignRefusesBadInput: a missing key, operator or invocation, a lifetime beyond the
// bound, an unknown action, a modify without a patch and an unreadable key are refused
// before anything is printed.
func TestHitlSignRefusesBadInput(t *testing.T) {
	t.Setenv("SW4RM_OPERATOR", "")
	t.Setenv("SW4RM_OPERATOR_KEY_FILE", "")
	keyFile, _ := operatorKeyFile(t)
	garbage := filepath.Join(t.TempDir(), "garbage.key")
	require.NoError(t, os.WriteFile(garbage, []byte("nope"), 0o600))
	base := []string{"hitl", "sign", "--key", keyFile, "--operator", "alice", "--invocation", "i1", "--rationale", "x"}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no key":        {[]string{"hitl", "sign", "--operator", "alice", "--invocation", "i1", "--decision", "approve", "--rationale", "x"}, "--key"},
		"no operator":   {[]string{"hitl", "sign", "--key", keyFile, "--invocation", "i1", "--decision", "approve", "--rationale", "x"}, "--operator"},
		"ttl too long":  {append(base, "--decision", "approve", "--ttl", "48h"), "--ttl"},
		"ttl negative":  {append(base, "--decision", "approve", "--ttl", "-1m"), "--ttl"},
		"bad action":    {append(base, "--decision", "maybe"), "not one of approve"},
		"modify, patch": {append(base, "--decision", "modify"), "patch"},
		"bad key":       {[]string{"hitl", "sign", "--key", garbage, "--operator", "alice", "--invocation", "i1", "--decision", "approve", "--rationale", "x"}, "key file"},
	} {
		out, _, err := runSplit(t, c.args...)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
		assert.Empty(t, out, name)
	}
}
