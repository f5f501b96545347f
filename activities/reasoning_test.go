package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/reasoning"
)

// TestReasoningEngine: activities use the configured reasoning engine, or the builtin one
// when none is configured.
func TestReasoningEngine(t *testing.T) {
	assert.Equal(t, reasoning.Builtin{}, (&Activities{}).reasoningEngine())
	ext, err := reasoning.NewExternal("127.0.0.1:1")
	assert.NoError(t, err)
	t.Cleanup(func() { _ = ext.Close() })
	assert.Same(t, ext, (&Activities{Reasoning: ext}).reasoningEngine())
}
