package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// definitionsStore implements store.WorkflowDefinitions over s.definitions, under s.mu.
type definitionsStore Store

func (d *definitionsStore) s() *Store { return (*Store)(d) }

// Definitions implements store.Store.
func (s *Store) Definitions() store.WorkflowDefinitions { return (*definitionsStore)(s) }

// copyDefinitionRecord gives the caller (or the store) its own Definition bytes.
func copyDefinitionRecord(rec store.WorkflowDefinitionRecord) store.WorkflowDefinitionRecord {
	rec.Definition = cloneBytes(rec.Definition)
	return rec
}

// PutDefinition implements store.WorkflowDefinitions: the version is decided under s.mu, so
// concurrent puts get consecutive versions.
func (d *definitionsStore) PutDefinition(ctx context.Context, workflowID string, def []byte, createdBy string) (store.WorkflowDefinitionRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.WorkflowDefinitionRecord{}, err
	}
	if workflowID == "" {
		return store.WorkflowDefinitionRecord{}, errors.New("memory: put definition: workflow_id is required")
	}
	s := d.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	versions := s.definitions[workflowID]
	if n := len(versions); n > 0 && bytes.Equal(versions[n-1].Definition, def) {
		return copyDefinitionRecord(versions[n-1]), nil // an idempotent retry
	}
	rec := copyDefinitionRecord(store.WorkflowDefinitionRecord{
		WorkflowID: workflowID, Version: len(versions) + 1, Definition: def, CreatedAt: now(), CreatedBy: createdBy,
	})
	s.definitions[workflowID] = append(versions, rec)
	return copyDefinitionRecord(rec), nil
}

// GetDefinition implements store.WorkflowDefinitions.
func (d *definitionsStore) GetDefinition(ctx context.Context, workflowID string, version int) (store.WorkflowDefinitionRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.WorkflowDefinitionRecord{}, err
	}
	s := d.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	versions := s.definitions[workflowID]
	if version == 0 {
		version = len(versions)
	}
	if version < 1 || version > len(versions) {
		return store.WorkflowDefinitionRecord{}, fmt.Errorf("memory: workflow definition %q version %d: %w", workflowID, version, store.ErrNotFound)
	}
	return copyDefinitionRecord(versions[version-1]), nil
}

// ListDefinitions implements store.WorkflowDefinitions.
func (d *definitionsStore) ListDefinitions(ctx context.Context, workflowID string) ([]store.WorkflowDefinitionRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.WorkflowDefinitionRecord, 0, len(s.definitions[workflowID]))
	for _, rec := range s.definitions[workflowID] {
		out = append(out, copyDefinitionRecord(rec))
	}
	return out, nil
}
