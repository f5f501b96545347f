package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// errKeysNotBuilt is a placeholder until the keys tables land.
var errKeysNotBuilt = errors.New("postgres: agent keys are not implemented yet")

type keys struct{ s *Store }

// Keys implements store.Store.
func (s *Store) Keys() store.Keys { return keys{s} }

// ListAgentKeys implements store.Keys.
func (keys) ListAgentKeys(context.Context, string) ([]store.AgentKey, error) {
	return nil, errKeysNotBuilt
}

// AddAgentKey implements store.Keys.
func (keys) AddAgentKey(context.Context, store.AgentKey, bool) error { return errKeysNotBuilt }

// RetireAgentKeys implements store.Keys.
func (keys) RetireAgentKeys(context.Context, string, string, time.Time) (int, error) {
	return 0, errKeysNotBuilt
}

// RevokeAgentKey implements store.Keys.
func (keys) RevokeAgentKey(context.Context, string, string, time.Time, string, string) (int, error) {
	return 0, errKeysNotBuilt
}

// KeysGeneration implements store.Keys.
func (keys) KeysGeneration(context.Context) (int64, error) { return 0, errKeysNotBuilt }

// UseNonce implements store.Keys.
func (keys) UseNonce(context.Context, string, string, time.Time) (bool, error) {
	return false, errKeysNotBuilt
}
