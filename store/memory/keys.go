package memory

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// keyState holds the agents' keys and the remembered nonces; it has its own lock because no
// other write has to be atomic with it.
type keyState struct {
	mu         sync.Mutex
	keys       map[string][]store.AgentKey // by agent_id, oldest first
	generation int64
	nonces     map[string]time.Time // agent + "\x00" + nonce → remembered until
	swept      time.Time
}

// keys implements store.Keys.
type keys struct{ st *keyState }

// Keys implements store.Store.
func (s *Store) Keys() store.Keys {
	s.keysOnce.Do(func() {
		s.keyState = &keyState{keys: map[string][]store.AgentKey{}, nonces: map[string]time.Time{}}
	})
	return keys{s.keyState}
}

// ListAgentKeys implements store.Keys.
func (k keys) ListAgentKeys(ctx context.Context, agentID string) ([]store.AgentKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	var out []store.AgentKey
	for id, ks := range k.st.keys {
		if agentID == "" || id == agentID {
			for _, key := range ks {
				key.PublicKey = slices.Clone(key.PublicKey)
				out = append(out, key)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b store.AgentKey) int {
		if c := strings.Compare(a.AgentID, b.AgentID); c != 0 {
			return c
		}
		return a.AddedAt.Compare(b.AddedAt)
	})
	return out, nil
}

// AddAgentKey implements store.Keys.
func (k keys) AddAgentKey(ctx context.Context, key store.AgentKey, first bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	key.AddedAt, key.NotAfter, key.RevokedAt = normTime(key.AddedAt), normTime(key.NotAfter), normTime(key.RevokedAt)
	if key.AddedAt.IsZero() {
		key.AddedAt = now()
	}
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	have := k.st.keys[key.AgentID]
	if i := slices.IndexFunc(have, func(h store.AgentKey) bool { return h.KeyID == key.KeyID }); i >= 0 {
		if !have[i].RevokedAt.IsZero() {
			return store.ErrKeyConflict
		}
		return nil
	}
	if first && slices.ContainsFunc(have, func(h store.AgentKey) bool { return h.ValidAt(key.AddedAt) }) {
		return store.ErrKeyConflict
	}
	key.PublicKey = slices.Clone(key.PublicKey)
	k.st.keys[key.AgentID] = append(have, key)
	k.st.generation++
	return nil
}

// RetireAgentKeys implements store.Keys.
func (k keys) RetireAgentKeys(ctx context.Context, agentID, keepKeyID string, at time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	at = normTime(at)
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	n := 0
	for i, h := range k.st.keys[agentID] {
		if h.KeyID != keepKeyID && (h.NotAfter.IsZero() || h.NotAfter.After(at)) {
			k.st.keys[agentID][i].NotAfter = at
			n++
		}
	}
	if n > 0 {
		k.st.generation++
	}
	return n, nil
}

// RevokeAgentKey implements store.Keys.
func (k keys) RevokeAgentKey(ctx context.Context, agentID, keyID string, at time.Time, by, reason string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	at = normTime(at)
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	found, n := false, 0
	for i, h := range k.st.keys[agentID] {
		if keyID != "" && h.KeyID != keyID {
			continue
		}
		found = true
		if h.RevokedAt.IsZero() {
			k.st.keys[agentID][i].RevokedAt, k.st.keys[agentID][i].RevokedBy, k.st.keys[agentID][i].RevokeReason = at, by, reason
			n++
		}
	}
	if !found {
		return 0, store.ErrNotFound
	}
	if n > 0 {
		k.st.generation++
	}
	return n, nil
}

// KeysGeneration implements store.Keys.
func (k keys) KeysGeneration(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	return k.st.generation, nil
}

// UseNonce implements store.Keys.
func (k keys) UseNonce(ctx context.Context, agentID, nonce string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	t := now()
	if t.Sub(k.st.swept) > time.Minute {
		for n, u := range k.st.nonces {
			if t.After(u) {
				delete(k.st.nonces, n)
			}
		}
		k.st.swept = t
	}
	key := agentID + "\x00" + nonce
	if u, ok := k.st.nonces[key]; ok && !t.After(u) {
		return false, nil
	}
	k.st.nonces[key] = until
	return true, nil
}
