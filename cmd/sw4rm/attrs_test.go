package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSearchAttributesPrintsEveryAttribute(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"search-attributes"})
	require.NoError(t, root.Execute())
	got := strings.Fields(out.String())
	require.Equal(t, searchAttributeFlags(), got)
	require.Contains(t, got, "SW4RMHitlPending=Bool")
	require.Contains(t, got, "SW4RMKind=Keyword")
}
