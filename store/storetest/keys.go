package storetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// agentKey returns a key of agentID derived from seed (32 bytes standing in for an Ed25519
// public key), added at addedAt.
func agentKey(agentID, seed string, addedAt time.Time) store.AgentKey {
	pub := sha256.Sum256([]byte(seed))
	return store.AgentKey{
		AgentID: agentID, KeyID: auth.KeyID(auth.AlgorithmEd25519, pub[:]), Algorithm: auth.AlgorithmEd25519,
		PublicKey: pub[:], AddedAt: addedAt,
	}
}

func listKeys(t *testing.T, k store.Keys, agentID string) []store.AgentKey {
	t.Helper()
	ks, err := k.ListAgentKeys(t.Context(), agentID)
	require.NoError(t, err)
	return ks
}

func keyIDs(ks []store.AgentKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.AgentID + "/" + k.KeyID
	}
	return out
}

func generation(t *testing.T, k store.Keys) int64 {
	t.Helper()
	g, err := k.KeysGeneration(t.Context())
	require.NoError(t, err)
	return g
}

func useNonce(t *testing.T, k store.Keys, agentID, nonce string, until time.Time) bool {
	t.Helper()
	fresh, err := k.UseNonce(t.Context(), agentID, nonce, until)
	require.NoError(t, err)
	return fresh
}

// keyBase is a fixed instant at microsecond precision (PostgreSQL's), in UTC.
var keyBase = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

func runKeys(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AddAndList", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx := t.Context()
		require.Empty(t, listKeys(t, k, ""))

		a1 := agentKey("alice", "a1", keyBase)
		a1.NotAfter = keyBase.Add(48 * time.Hour)
		b1 := agentKey("bob", "b1", keyBase.Add(-time.Hour))
		a2 := agentKey("alice", "a2", keyBase.Add(time.Minute))
		require.NoError(t, k.AddAgentKey(ctx, a1, true))
		require.NoError(t, k.AddAgentKey(ctx, b1, true))
		require.NoError(t, k.AddAgentKey(ctx, a2, false))

		// Ordered by agent_id, then AddedAt; every field kept.
		require.Equal(t, []store.AgentKey{a1, a2, b1}, listKeys(t, k, ""))
		require.Equal(t, []store.AgentKey{b1}, listKeys(t, k, "bob"))
		require.Empty(t, listKeys(t, k, "carol"))

		// The listing is a copy.
		got := listKeys(t, k, "bob")
		got[0].PublicKey[0] ^= 0xff
		require.Equal(t, b1.PublicKey, listKeys(t, k, "bob")[0].PublicKey)
	})

	t.Run("ZeroAddedAtIsNow", func(t *testing.T) {
		k := newStore(t).Keys()
		require.NoError(t, k.AddAgentKey(t.Context(), agentKey("alice", "a1", time.Time{}), true))
		requireRecent(t, listKeys(t, k, "alice")[0].AddedAt)
	})

	t.Run("FirstClaim", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx := t.Context()
		a1, a2 := agentKey("alice", "a1", keyBase), agentKey("alice", "a2", keyBase.Add(time.Minute))
		require.NoError(t, k.AddAgentKey(ctx, a1, true))
		g := generation(t, k)

		// A first registration of a claimed agent_id is refused and changes nothing (§6.2: an
		// identity cannot be taken over by registering again).
		require.ErrorIs(t, k.AddAgentKey(ctx, a2, true), store.ErrKeyConflict)
		require.Equal(t, []string{"alice/" + a1.KeyID}, keyIDs(listKeys(t, k, "alice")))
		require.Equal(t, g, generation(t, k))

		// Re-adding the key the agent has is an idempotent no-op, first or not.
		require.NoError(t, k.AddAgentKey(ctx, a1, true))
		require.NoError(t, k.AddAgentKey(ctx, a1, false))
		require.Len(t, listKeys(t, k, "alice"), 1)
		require.Equal(t, g, generation(t, k), "a no-op add does not change the generation")

		// Another agent is another identity.
		require.NoError(t, k.AddAgentKey(ctx, agentKey("bob", "a2", keyBase), true))
	})

	t.Run("FirstClaimAfterExpiry", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx := t.Context()
		old := agentKey("alice", "old", keyBase)
		old.NotAfter = keyBase.Add(time.Hour)
		require.NoError(t, k.AddAgentKey(ctx, old, true))
		// Valid at AddedAt: refused. After NotAfter the agent has no valid key: claimable.
		require.ErrorIs(t, k.AddAgentKey(ctx, agentKey("alice", "early", keyBase.Add(time.Hour-time.Microsecond)), true), store.ErrKeyConflict)
		require.NoError(t, k.AddAgentKey(ctx, agentKey("alice", "late", keyBase.Add(time.Hour)), true))
	})

	t.Run("ConcurrentFirstClaims", func(t *testing.T) {
		k := newStore(t).Keys()
		const n = 8
		winner := oneWins(t, n, store.ErrKeyConflict, func(i int) error {
			return k.AddAgentKey(t.Context(), agentKey("alice", fmt.Sprintf("claim-%d", i), keyBase), true)
		})
		require.Equal(t, []string{"alice/" + agentKey("alice", fmt.Sprintf("claim-%d", winner), keyBase).KeyID},
			keyIDs(listKeys(t, k, "alice")))
	})

	t.Run("ConcurrentIdempotentAdds", func(t *testing.T) {
		k := newStore(t).Keys()
		a1 := agentKey("alice", "a1", keyBase)
		var (
			mu   sync.Mutex
			errs []error
		)
		atOnce(8, func(int) {
			err := k.AddAgentKey(t.Context(), a1, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
		})
		require.Empty(t, errs, "adding the same key concurrently succeeds every time")
		require.Len(t, listKeys(t, k, "alice"), 1)
	})

	t.Run("Retire", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx := t.Context()
		a1, a2, a3 := agentKey("alice", "a1", keyBase), agentKey("alice", "a2", keyBase.Add(time.Minute)), agentKey("alice", "a3", keyBase.Add(2*time.Minute))
		a3.NotAfter = keyBase.Add(time.Hour)
		b1 := agentKey("bob", "b1", keyBase)
		for _, key := range []store.AgentKey{a1, a3, b1, a2} {
			require.NoError(t, k.AddAgentKey(ctx, key, false))
		}
		g := generation(t, k)

		// A rotation to a2 with a 30-minute overlap ends a1 then; a3 already ends later than
		// that, so it is shortened too; a2 and bob's key are untouched.
		overlap := keyBase.Add(30 * time.Minute)
		n, err := k.RetireAgentKeys(ctx, "alice", a2.KeyID, overlap)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		g2 := generation(t, k)
		require.NotEqual(t, g, g2)
		byID := map[string]store.AgentKey{}
		for _, key := range listKeys(t, k, "") {
			byID[key.KeyID] = key
		}
		for _, id := range []string{a1.KeyID, a3.KeyID} {
			require.Equal(t, overlap, byID[id].NotAfter, id)
			require.True(t, byID[id].ValidAt(overlap.Add(-time.Microsecond)), "valid within the overlap")
			require.False(t, byID[id].ValidAt(overlap), "invalid from NotAfter on")
		}
		require.True(t, byID[a2.KeyID].NotAfter.IsZero())
		require.True(t, byID[a2.KeyID].ValidAt(overlap.Add(time.Hour)))
		require.True(t, byID[b1.KeyID].NotAfter.IsZero())

		// Retiring again at the same or a later time changes nothing.
		for _, at := range []time.Time{overlap, overlap.Add(time.Hour)} {
			n, err = k.RetireAgentKeys(ctx, "alice", a2.KeyID, at)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, g2, generation(t, k), "a no-op retirement does not change the generation")
		}
		// An earlier time shortens the overlap.
		n, err = k.RetireAgentKeys(ctx, "alice", a2.KeyID, overlap.Add(-time.Minute))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.NotEqual(t, g2, generation(t, k))

		// An unknown agent has nothing to retire.
		n, err = k.RetireAgentKeys(ctx, "carol", "", overlap)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("Revoke", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx := t.Context()
		a1, a2, a3 := agentKey("alice", "a1", keyBase), agentKey("alice", "a2", keyBase.Add(time.Minute)), agentKey("alice", "a3", keyBase.Add(2*time.Minute))
		b1 := agentKey("bob", "b1", keyBase)
		for _, key := range []store.AgentKey{a1, a2, a3, b1} {
			require.NoError(t, k.AddAgentKey(ctx, key, false))
		}
		g := generation(t, k)
		at := keyBase.Add(time.Hour)

		// One key.
		n, err := k.RevokeAgentKey(ctx, "alice", a1.KeyID, at, "olga", "leaked")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		g2 := generation(t, k)
		require.NotEqual(t, g, g2)
		got := listKeys(t, k, "alice")[0]
		require.Equal(t, a1.KeyID, got.KeyID)
		require.Equal(t, at, got.RevokedAt)
		require.Equal(t, "olga", got.RevokedBy)
		require.Equal(t, "leaked", got.RevokeReason)
		require.True(t, got.ValidAt(at.Add(-time.Microsecond)))
		require.False(t, got.ValidAt(at))

		// Again: found, nothing revoked, no change.
		n, err = k.RevokeAgentKey(ctx, "alice", a1.KeyID, at.Add(time.Minute), "pete", "again")
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, g2, generation(t, k))
		got = listKeys(t, k, "alice")[0]
		require.Equal(t, at, got.RevokedAt, "the first revocation stands")
		require.Equal(t, "olga", got.RevokedBy)

		// A revoked key cannot come back, first or not.
		require.ErrorIs(t, k.AddAgentKey(ctx, a1, false), store.ErrKeyConflict)
		require.ErrorIs(t, k.AddAgentKey(ctx, a1, true), store.ErrKeyConflict)
		require.Equal(t, g2, generation(t, k))

		// Unknown keys and agents.
		_, err = k.RevokeAgentKey(ctx, "alice", agentKey("alice", "nope", keyBase).KeyID, at, "olga", "x")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = k.RevokeAgentKey(ctx, "alice", b1.KeyID, at, "olga", "another agent's key")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = k.RevokeAgentKey(ctx, "carol", "", at, "olga", "x")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, g2, generation(t, k))

		// All of the agent's keys: the two not yet revoked count.
		n, err = k.RevokeAgentKey(ctx, "alice", "", at.Add(time.Minute), "olga", "compromised host")
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.NotEqual(t, g2, generation(t, k))
		for _, key := range listKeys(t, k, "alice") {
			require.False(t, key.RevokedAt.IsZero(), key.KeyID)
			require.False(t, key.ValidAt(at.Add(time.Minute)), key.KeyID)
		}
		require.True(t, listKeys(t, k, "bob")[0].RevokedAt.IsZero(), "other agents keep their keys")
		g3 := generation(t, k)
		n, err = k.RevokeAgentKey(ctx, "alice", "", at.Add(2*time.Minute), "olga", "again")
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, g3, generation(t, k))

		// With every key revoked the agent has no valid key: a new first registration claims it.
		require.NoError(t, k.AddAgentKey(ctx, agentKey("alice", "a4", at.Add(time.Hour)), true))
	})

	t.Run("Nonces", func(t *testing.T) {
		k := newStore(t).Keys()
		later := time.Now().Add(time.Hour)
		require.True(t, useNonce(t, k, "alice", "n-0000000000000001", later))
		require.False(t, useNonce(t, k, "alice", "n-0000000000000001", later), "a replay")
		require.False(t, useNonce(t, k, "alice", "n-0000000000000001", later.Add(time.Hour)), "still a replay")
		require.True(t, useNonce(t, k, "bob", "n-0000000000000001", later), "nonces are per agent")
		require.True(t, useNonce(t, k, "alice", "n-0000000000000002", later))

		// A nonce remembered until a time that has passed is fresh again, and remembered anew.
		past := time.Now().Add(-time.Second)
		require.True(t, useNonce(t, k, "alice", "n-0000000000000003", past))
		require.True(t, useNonce(t, k, "alice", "n-0000000000000003", later), "expired, so fresh")
		require.False(t, useNonce(t, k, "alice", "n-0000000000000003", later), "remembered again")
	})

	t.Run("ConcurrentNonces", func(t *testing.T) {
		k := newStore(t).Keys()
		later := time.Now().Add(time.Hour)
		const n = 16
		var (
			mu    sync.Mutex
			fresh int
			errs  []error
		)
		atOnce(n, func(int) {
			ok, err := k.UseNonce(t.Context(), "alice", "same-nonce-000001", later)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				fresh++
			}
		})
		require.Empty(t, errs)
		require.Equal(t, 1, fresh, "exactly one use of a nonce is fresh")

		// Distinct nonces used at once are all fresh; each a second time, a replay.
		for _, want := range []bool{true, false} {
			got := make([]bool, 4*n)
			atOnce(4*n, func(i int) {
				ok, err := k.UseNonce(t.Context(), fmt.Sprintf("agent-%d", i%3), fmt.Sprintf("nonce-%016d", i), later)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				got[i] = ok
			})
			require.Empty(t, errs)
			for i, ok := range got {
				require.Equal(t, want, ok, "nonce %d", i)
			}
		}
	})

	t.Run("CancelledNonce", func(t *testing.T) {
		k := newStore(t).Keys()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := k.UseNonce(ctx, "alice", "n-0000000000000001", time.Now().Add(time.Hour))
		require.ErrorIs(t, err, ctx.Err())
	})
}
