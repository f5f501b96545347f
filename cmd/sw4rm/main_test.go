package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
