package inference

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

func TestScopesOf(t *testing.T) {
	_, _, perr := ScopesOf(&reasoningpb.ParallelismCheckRequest{ScopeA: "repo:r path:a", ScopeB: "repo:r path:b"})
	require.Nil(t, perr)
	_, _, perr = ScopesOf(&reasoningpb.ParallelismCheckRequest{ScopeB: "repo:r"})
	require.NotNil(t, perr)
	assert.Contains(t, perr.Error(), "validation_error: scope_a: ")
	_, _, perr = ScopesOf(&reasoningpb.ParallelismCheckRequest{ScopeA: "repo:r", ScopeB: " "})
	require.NotNil(t, perr)
	assert.Contains(t, perr.Error(), "validation_error: scope_b: ")
}
