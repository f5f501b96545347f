package memory

import (
	"context"
	"errors"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// errHandoffsNotBuilt is a placeholder until the handoff projection lands.
var errHandoffsNotBuilt = errors.New("memory: handoffs are not implemented yet")

type handoffs struct{}

// Handoffs implements store.Store.
func (s *Store) Handoffs() store.Handoffs { return handoffs{} }

// CreateHandoff implements store.Handoffs.
func (handoffs) CreateHandoff(context.Context, store.HandoffRecord, ...store.Handoff) (store.HandoffRecord, error) {
	return store.HandoffRecord{}, errHandoffsNotBuilt
}

// GetHandoff implements store.Handoffs.
func (handoffs) GetHandoff(context.Context, string) (store.HandoffRecord, error) {
	return store.HandoffRecord{}, errHandoffsNotBuilt
}

// UpdateHandoff implements store.Handoffs.
func (handoffs) UpdateHandoff(context.Context, string, handoffpb.HandoffStatus, string, string, string) error {
	return errHandoffsNotBuilt
}

// ListOfferedTo implements store.Handoffs.
func (handoffs) ListOfferedTo(context.Context, string) ([]store.HandoffRecord, error) {
	return nil, errHandoffsNotBuilt
}

// ListByCorrelation implements store.Handoffs.
func (handoffs) ListByCorrelation(context.Context, string) ([]store.HandoffRecord, error) {
	return nil, errHandoffsNotBuilt
}

// OpenDelegations implements store.Handoffs.
func (handoffs) OpenDelegations(context.Context) (map[string]int, error) {
	return nil, errHandoffsNotBuilt
}

// Fence implements store.Handoffs.
func (handoffs) Fence(context.Context, store.Fence) error { return errHandoffsNotBuilt }

// Fenced implements store.Handoffs.
func (handoffs) Fenced(context.Context, string, string) (store.Fence, bool, error) {
	return store.Fence{}, false, errHandoffsNotBuilt
}

// FencesGeneration implements store.Handoffs.
func (handoffs) FencesGeneration(context.Context) (int64, error) { return 0, errHandoffsNotBuilt }
