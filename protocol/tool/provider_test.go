package tool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolveProvider(t *testing.T) {
	id, err := ResolveProvider("echo", []string{"fake"})
	require.NoError(t, err)
	require.Equal(t, "fake", id)

	_, err = ResolveProvider("echo", nil)
	require.Equal(t, CodeNotFound, CodeOf(err))
	require.ErrorContains(t, err, `no provider offers tool "echo"`)

	_, err = ResolveProvider("echo", []string{"fake", "builtin"})
	require.Equal(t, CodeValidation, CodeOf(err))
	require.ErrorContains(t, err, "offered by 2 providers (builtin, fake): name one in provider_id")
}
