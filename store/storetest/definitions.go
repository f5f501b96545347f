package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests WorkflowDefinitions: versions per workflow_id, the idempotent re-put of
// the latest definition, race-free versions under concurrent puts, and reads (§17.7).

func putDefinition(t *testing.T, d store.WorkflowDefinitions, workflowID, def, by string) store.WorkflowDefinitionRecord {
	t.Helper()
	rec, err := d.PutDefinition(t.Context(), workflowID, []byte(def), by)
	require.NoError(t, err, "put definition %s", workflowID)
	return rec
}

func definitionVersions(recs []store.WorkflowDefinitionRecord) []int {
	out := make([]int, len(recs))
	for i, r := range recs {
		out[i] = r.Version
	}
	return out
}

func runDefinitions(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Versions", func(t *testing.T) {
		d := newStore(t).Definitions()
		v1 := putDefinition(t, d, "wf", "def one", "operator:ops")
		require.Equal(t, store.WorkflowDefinitionRecord{WorkflowID: "wf", Version: 1, Definition: []byte("def one"),
			CreatedAt: v1.CreatedAt, CreatedBy: "operator:ops"}, v1)
		requireRecent(t, v1.CreatedAt)
		v2 := putDefinition(t, d, "wf", "def two", "agent:a")
		require.Equal(t, 2, v2.Version)
		require.Equal(t, "agent:a", v2.CreatedBy)
		// Another workflow_id has its own numbering.
		require.Equal(t, 1, putDefinition(t, d, "other", "def two", "agent:a").Version)
		// Going back to an older definition is a change: a new version.
		require.Equal(t, 3, putDefinition(t, d, "wf", "def one", "agent:b").Version)
	})

	t.Run("IdempotentRePut", func(t *testing.T) {
		d := newStore(t).Definitions()
		v1 := putDefinition(t, d, "wf", "same", "agent:a")
		again := putDefinition(t, d, "wf", "same", "agent:b")
		require.Equal(t, v1, again, "a byte-identical re-put returns the latest, creator included")
		recs, err := d.ListDefinitions(t.Context(), "wf")
		require.NoError(t, err)
		require.Len(t, recs, 1)
		putDefinition(t, d, "wf", "changed", "agent:a")
		require.Equal(t, 2, putDefinition(t, d, "wf", "changed", "agent:a").Version)
	})

	t.Run("Get", func(t *testing.T) {
		d := newStore(t).Definitions()
		_, err := d.GetDefinition(t.Context(), "wf", 0)
		require.ErrorIs(t, err, store.ErrNotFound, "no versions yet")
		v1 := putDefinition(t, d, "wf", "one", "a")
		v2 := putDefinition(t, d, "wf", "two", "b")
		latest, err := d.GetDefinition(t.Context(), "wf", 0)
		require.NoError(t, err)
		require.Equal(t, v2, latest)
		got, err := d.GetDefinition(t.Context(), "wf", 1)
		require.NoError(t, err)
		require.Equal(t, v1, got)
		_, err = d.GetDefinition(t.Context(), "wf", 3)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = d.GetDefinition(t.Context(), "nothing", 1)
		require.ErrorIs(t, err, store.ErrNotFound)
		// The caller owns what it gets: changing it changes nothing stored.
		got.Definition[0] = 'X'
		again, err := d.GetDefinition(t.Context(), "wf", 1)
		require.NoError(t, err)
		require.Equal(t, []byte("one"), again.Definition)
	})

	t.Run("ListOrder", func(t *testing.T) {
		d := newStore(t).Definitions()
		recs, err := d.ListDefinitions(t.Context(), "wf")
		require.NoError(t, err)
		require.Empty(t, recs)
		for i := range 5 {
			putDefinition(t, d, "wf", fmt.Sprintf("def %d", i), "a")
		}
		putDefinition(t, d, "wf2", "x", "a")
		recs, err = d.ListDefinitions(t.Context(), "wf")
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3, 4, 5}, definitionVersions(recs))
		for i, r := range recs {
			require.Equal(t, fmt.Sprintf("def %d", i), string(r.Definition))
			require.Equal(t, "wf", r.WorkflowID)
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		d := newStore(t).Definitions()
		const n = 16
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			got  []int
			errs []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := d.PutDefinition(t.Context(), "wf", fmt.Appendf(nil, "def %d", i), "a")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				got = append(got, rec.Version)
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		slices.Sort(got)
		want := make([]int, n)
		for i := range want {
			want[i] = i + 1
		}
		require.Equal(t, want, got, "distinct, consecutive versions")
		recs, err := d.ListDefinitions(t.Context(), "wf")
		require.NoError(t, err)
		require.Equal(t, want, definitionVersions(recs))
	})
}
