package store

import (
	"context"
	"errors"
	"time"
)

// ErrKeyConflict reports that an agent_id already has a valid key, so a first registration
// cannot claim it (§6.2: an identity cannot be taken over by registering again).
var ErrKeyConflict = errors.New("store: the agent already has a valid key")

// AgentKey is one public key an agent proves its calls with (§6.2). Keys are kept after
// expiry and revocation so the audit trail can name them.
type AgentKey struct {
	// AgentID is the agent the key belongs to.
	AgentID string
	// KeyID names the key: the algorithm, a colon, and the first 16 hex digits of the
	// SHA-256 of PublicKey (see auth.KeyID).
	KeyID string
	// Algorithm is "ed25519" (§6.2's preferred algorithm).
	Algorithm string
	// PublicKey is the raw public key (32 bytes for Ed25519).
	PublicKey []byte
	// AddedAt is when the key was registered.
	AddedAt time.Time
	// NotAfter, when set, ends the key's validity: a rotated-out key stays valid for an
	// overlap window and then expires (§23).
	NotAfter time.Time
	// RevokedAt, when set, is when an operator revoked the key (§23); it is invalid from then.
	RevokedAt time.Time
	// RevokedBy is the operator who revoked it.
	RevokedBy string
	// RevokeReason says why.
	RevokeReason string
}

// ValidAt reports whether the key proves calls made at t.
func (k AgentKey) ValidAt(t time.Time) bool {
	if !k.RevokedAt.IsZero() && !t.Before(k.RevokedAt) {
		return false
	}
	return k.NotAfter.IsZero() || t.Before(k.NotAfter)
}

// Keys holds agents' public keys and the nonces of signed calls (§6.2, §23). Every frontend
// reads the same keys, so a revocation anywhere is seen everywhere.
type Keys interface {
	// ListAgentKeys returns the keys of one agent, or of every agent when agentID is empty,
	// including expired and revoked ones, ordered by agent_id and then AddedAt.
	ListAgentKeys(ctx context.Context, agentID string) ([]AgentKey, error)
	// AddAgentKey records k. With first set it succeeds only when the agent has no key valid
	// at k.AddedAt and returns ErrKeyConflict otherwise; two concurrent first registrations
	// of one agent_id cannot both succeed. Adding a key the agent already has (same KeyID) is
	// a no-op that succeeds, whatever first says, unless that key is revoked (ErrKeyConflict).
	// A zero k.AddedAt means now.
	AddAgentKey(ctx context.Context, k AgentKey, first bool) error
	// RetireAgentKeys sets NotAfter to at on every key of the agent other than keepKeyID whose
	// NotAfter is unset or later than at (a rotation's overlap window); it returns how many
	// keys it changed.
	RetireAgentKeys(ctx context.Context, agentID, keepKeyID string, at time.Time) (int, error)
	// RevokeAgentKey revokes the agent's key keyID, or every key of the agent when keyID is
	// empty, at time at, recording by and reason; it returns how many keys it revoked (keys
	// already revoked do not count) and ErrNotFound when the agent has no such key.
	RevokeAgentKey(ctx context.Context, agentID, keyID string, at time.Time, by, reason string) (int, error)
	// KeysGeneration returns a number that changes whenever any key is added, retired or
	// revoked; frontends poll it to drop cached keys within a second of a revocation.
	KeysGeneration(ctx context.Context) (int64, error)
	// UseNonce records that agentID used nonce, remembered until until, and reports whether
	// it was fresh: false means it was used before and is still remembered (a replay).
	UseNonce(ctx context.Context, agentID, nonce string, until time.Time) (bool, error)
}
