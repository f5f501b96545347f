package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// runArtifacts checks the versioned negotiation artifacts.
func runArtifacts(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AppendListFilterDuplicate", func(t *testing.T) {
		arts := newStore(t).Artifacts()
		ctx := t.Context()
		in := []store.Artifact{
			{NegotiationID: "n1", Kind: "proposal", Version: "v10", ContentType: "application/json", Content: []byte(`{"p":10}`)},
			{NegotiationID: "n1", Kind: "decision", Version: "v1", ContentType: "text/plain", Content: []byte("accept")},
			{NegotiationID: "n2", Kind: "proposal", Version: "v10", ContentType: "application/json", Content: []byte(`{"other":true}`)},
			{NegotiationID: "n1", Kind: "proposal", Version: "v2", ContentType: "application/json", Content: []byte(`{"p":2}`)},
		}
		for _, a := range in {
			require.NoError(t, arts.AppendArtifact(ctx, a))
		}
		check := func(want []store.Artifact, got []store.Artifact) {
			t.Helper()
			require.Len(t, got, len(want))
			for i := range want {
				require.Equal(t, want[i].NegotiationID, got[i].NegotiationID)
				require.Equal(t, want[i].Kind, got[i].Kind)
				require.Equal(t, want[i].Version, got[i].Version)
				require.Equal(t, want[i].ContentType, got[i].ContentType)
				require.Equal(t, want[i].Content, got[i].Content)
				requireRecent(t, got[i].CreatedAt)
			}
		}
		got, err := arts.ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[1], in[3]}, got) // insertion order, not version order
		got, err = arts.ListArtifacts(ctx, "n1", "proposal")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[3]}, got)
		got, err = arts.ListArtifacts(ctx, "n2", "")
		require.NoError(t, err)
		check([]store.Artifact{in[2]}, got)
		got, err = arts.ListArtifacts(ctx, "n1", "vote")
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = arts.ListArtifacts(ctx, "unknown", "")
		require.NoError(t, err)
		require.Empty(t, got)

		dup := in[0]
		dup.Content = []byte(`{"p":"replaced"}`)
		require.ErrorIs(t, arts.AppendArtifact(ctx, dup), store.ErrDuplicateArtifact)
		got, err = arts.ListArtifacts(ctx, "n1", "proposal")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[3]}, got) // unchanged
	})
}
