package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/workflows"
)

func TestSearchAttributesPrintsEveryAttribute(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"search-attributes"})
	require.NoError(t, root.Execute())
	got := strings.Fields(out.String())
	require.Equal(t, workflows.SearchAttributeFlags(), got)
	require.Contains(t, got, "SW4RMHitlPending=Bool")
	require.Contains(t, got, "SW4RMKind=Keyword")
}
