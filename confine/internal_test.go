package confine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapErrRecognisesOSRootEscapes checks the backstop for a tree changed between
// resolution and use: os.Root's own refusal of an escape, found only by its text, becomes a
// refusal. The error is taken from os.Root itself, so a Go release that rewords it fails here.
func TestMapErrRecognisesOSRootEscapes(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, root.Close()) })
	_, escape := root.Stat("../x")
	require.Error(t, escape)
	require.NoError(t, os.Symlink("../x", filepath.Join(dir, "out")))
	linkEscape := root.Rename("out/y", "z")
	require.Error(t, linkEscape)

	var audited []string
	r := &Root{audit: func(op, path string, _ error) { audited = append(audited, op+" "+path) }}
	for _, e := range []error{escape, linkEscape} {
		got := r.mapErr(OpStat, "p", e)
		assert.ErrorIs(t, got, ErrPermissionDenied, e.Error())
		assert.ErrorIs(t, got, e, "the cause is kept")
	}
	assert.Equal(t, []string{"stat p", "stat p"}, audited)

	other := errors.New("disk on fire")
	assert.Same(t, other, r.mapErr(OpStat, "p", other))
	assert.NoError(t, r.mapErr(OpStat, "p", nil))
	assert.Len(t, audited, 2, "only escapes are refusals")
}
