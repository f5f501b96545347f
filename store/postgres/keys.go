package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// keysLockClass is the first key of the two-int4 advisory lock taken per agent (second key
// hashtext(agent_id)) by AddAgentKey, so that of two concurrent first registrations of one
// agent_id the second sees the first's key and is refused (§6.2).
const keysLockClass int32 = 0x534b // "SK"

// keys implements store.Keys on agent_keys, agent_keys_generation and signed_call_nonces.
type keys struct{ s *Store }

// Keys implements store.Store.
func (s *Store) Keys() store.Keys { return keys{s} }

const agentKeyColumns = `agent_id, key_id, algorithm, public_key, added_at, not_after, revoked_at, revoked_by, revoke_reason`

// ListAgentKeys implements store.Keys.
func (k keys) ListAgentKeys(ctx context.Context, agentID string) ([]store.AgentKey, error) {
	rows, err := k.s.pool.Query(ctx, `
		SELECT `+agentKeyColumns+` FROM agent_keys
		WHERE $1 = '' OR agent_id = $1
		ORDER BY agent_id COLLATE "C", added_at, seq`, agentID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list keys of %q: %w", agentID, unavailable(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.AgentKey, error) {
		var (
			key                 store.AgentKey
			notAfter, revokedAt *time.Time
		)
		err := row.Scan(&key.AgentID, &key.KeyID, &key.Algorithm, &key.PublicKey, &key.AddedAt, &notAfter, &revokedAt, &key.RevokedBy, &key.RevokeReason)
		key.AddedAt = utc(key.AddedAt)
		if notAfter != nil {
			key.NotAfter = notAfter.UTC()
		}
		if revokedAt != nil {
			key.RevokedAt = revokedAt.UTC()
		}
		return key, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list keys of %q: %w", agentID, unavailable(err))
	}
	return out, nil
}

// AddAgentKey implements store.Keys. The agent's advisory lock makes the check and the insert
// one step across every process sharing the database.
func (k keys) AddAgentKey(ctx context.Context, key store.AgentKey, first bool) error {
	if key.AddedAt.IsZero() {
		key.AddedAt = time.Now()
	}
	var conflict bool
	err := pgx.BeginFunc(ctx, k.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, keysLockClass, key.AgentID); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// have: whether the agent has this key and whether it is revoked; valid: whether any of
		// its keys is valid at added_at (store.AgentKey.ValidAt).
		var have, revoked, valid bool
		if err := tx.QueryRow(ctx, `
			SELECT
				EXISTS (SELECT 1 FROM agent_keys WHERE agent_id = $1 AND key_id = $2),
				EXISTS (SELECT 1 FROM agent_keys WHERE agent_id = $1 AND key_id = $2 AND revoked_at IS NOT NULL),
				EXISTS (SELECT 1 FROM agent_keys WHERE agent_id = $1
					AND (revoked_at IS NULL OR $3 < revoked_at) AND (not_after IS NULL OR $3 < not_after))`,
			key.AgentID, key.KeyID, key.AddedAt).Scan(&have, &revoked, &valid); err != nil {
			return fmt.Errorf("check: %w", err)
		}
		switch {
		case have:
			conflict = revoked // adding a key the agent has is a no-op, unless it is revoked
			return nil
		case first && valid:
			conflict = true
			return nil
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO agent_keys (agent_id, key_id, algorithm, public_key, added_at, not_after, revoked_at, revoked_by, revoke_reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			key.AgentID, key.KeyID, key.Algorithm, key.PublicKey, key.AddedAt, nullTime(key.NotAfter), nullTime(key.RevokedAt),
			key.RevokedBy, key.RevokeReason); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE agent_keys_generation SET generation = generation + 1`); err != nil {
			return fmt.Errorf("bump generation: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: add key %s of %q: %w", key.KeyID, key.AgentID, unavailable(err))
	}
	if conflict {
		return fmt.Errorf("postgres: add key %s of %q: %w", key.KeyID, key.AgentID, store.ErrKeyConflict)
	}
	return nil
}

// RetireAgentKeys implements store.Keys in one statement, the generation bumped with it when
// a key changed.
func (k keys) RetireAgentKeys(ctx context.Context, agentID, keepKeyID string, at time.Time) (int, error) {
	var n int
	if err := k.s.pool.QueryRow(ctx, `
		WITH
		ret AS (
			UPDATE agent_keys SET not_after = $3
			WHERE agent_id = $1 AND key_id <> $2 AND (not_after IS NULL OR not_after > $3)
			RETURNING 1
		),
		gen AS (UPDATE agent_keys_generation SET generation = generation + 1 WHERE EXISTS (SELECT 1 FROM ret))
		SELECT count(*) FROM ret`, agentID, keepKeyID, at).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: retire keys of %q: %w", agentID, unavailable(err))
	}
	return n, nil
}

// RevokeAgentKey implements store.Keys in one statement, the generation bumped with it when a
// key changed. The count of matching keys reads the snapshot before the update, which holds
// the same keys: revocation never deletes a row.
func (k keys) RevokeAgentKey(ctx context.Context, agentID, keyID string, at time.Time, by, reason string) (int, error) {
	var matched, n int
	if err := k.s.pool.QueryRow(ctx, `
		WITH
		rev AS (
			UPDATE agent_keys SET revoked_at = $3, revoked_by = $4, revoke_reason = $5
			WHERE agent_id = $1 AND ($2 = '' OR key_id = $2) AND revoked_at IS NULL
			RETURNING 1
		),
		gen AS (UPDATE agent_keys_generation SET generation = generation + 1 WHERE EXISTS (SELECT 1 FROM rev))
		SELECT (SELECT count(*) FROM agent_keys WHERE agent_id = $1 AND ($2 = '' OR key_id = $2)), (SELECT count(*) FROM rev)`,
		agentID, keyID, at, by, reason).Scan(&matched, &n); err != nil {
		return 0, fmt.Errorf("postgres: revoke key %q of %q: %w", keyID, agentID, unavailable(err))
	}
	if matched == 0 {
		return 0, fmt.Errorf("postgres: revoke key %q of %q: %w", keyID, agentID, store.ErrNotFound)
	}
	return n, nil
}

// KeysGeneration implements store.Keys.
func (k keys) KeysGeneration(ctx context.Context) (int64, error) {
	var g int64
	if err := k.s.pool.QueryRow(ctx, `SELECT generation FROM agent_keys_generation`).Scan(&g); err != nil {
		return 0, fmt.Errorf("postgres: keys generation: %w", unavailable(err))
	}
	return g, nil
}

// UseNonce implements store.Keys through the store's nonce batcher (nonces.go): concurrent
// calls share one statement. When ctx ends first the call returns ctx's error; the nonce may
// still be recorded, which only makes a retry of the same signed call a replay.
func (k keys) UseNonce(ctx context.Context, agentID, nonce string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := &nonceRequest{agentID: agentID, nonce: nonce, until: until, reply: make(chan nonceReply, 1)}
	b := k.s.nonces
	select {
	case b.requests <- r:
	case <-b.stop:
		return false, errNoncesClosed
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case rep := <-r.reply:
		return rep.fresh, rep.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// errNoncesClosed answers UseNonce after Close.
var errNoncesClosed = errors.New("postgres: use nonce: the store is closed")
