package negotiation

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pretty-printed schema with non-ASCII text becomes one line of printable ASCII (what gRPC
// allows in metadata) that reads back as the same JSON; text that is not JSON goes as it is.
func TestMetadataJSON(t *testing.T) {
	raw := []byte("{\n\t\"title\": \"Prix en € — 🚀\",\n  \"type\": \"object\"\n}\n")
	got := metadataJSON(raw)
	for i := 0; i < len(got); i++ {
		require.True(t, got[i] >= 0x20 && got[i] < 0x7f, "byte %d of %q is not printable ASCII", i, got)
	}
	assert.Equal(t, `{"title":"Prix en \u20ac \u2014 \ud83d\ude80","type":"object"}`, got)
	var a, b any
	require.NoError(t, json.Unmarshal(raw, &a))
	require.NoError(t, json.Unmarshal([]byte(got), &b))
	assert.Equal(t, a, b)

	assert.Equal(t, "not json {", metadataJSON([]byte("not json {")))
}
