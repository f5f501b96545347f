package frontend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestNegotiationUpdateID: a keyed call's update id is the same for the same caller, key,
// update and request — a retry — and differs when any of them differs, so that a key names
// one call of one caller.
func TestNegotiationUpdateID(t *testing.T) {
	draft := workflows.NegotiationDraft{From: "b", Counter: true, ContentType: "application/json", Payload: []byte(`{"price":110}`)}
	id := func(caller, key, name string, arg any) string {
		t.Helper()
		s, err := negotiationUpdateID(caller, key, name, arg)
		require.NoError(t, err)
		return s
	}
	first := id("agent:b", "k1", workflows.NegotiationDraftUpdate, draft)
	assert.Equal(t, first, id("agent:b", "k1", workflows.NegotiationDraftUpdate, draft), "a retry names the same update")
	assert.Contains(t, first, workflows.NegotiationDraftUpdate+"/", "the id says which update it is")

	other := draft
	other.Payload = []byte(`{"price":100}`)
	for name, got := range map[string]string{
		"another caller":  id("agent:c", "k1", workflows.NegotiationDraftUpdate, draft),
		"another key":     id("agent:b", "k2", workflows.NegotiationDraftUpdate, draft),
		"another request": id("agent:b", "k1", workflows.NegotiationDraftUpdate, other),
		"another update":  id("agent:b", "k1", workflows.NegotiationEvaluateUpdate, draft),
	} {
		assert.NotEqual(t, first, got, name)
	}
}
