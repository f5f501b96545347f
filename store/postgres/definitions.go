package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// definitionsLockClass is the first key of the two-int4 advisory lock taken per workflow_id
// (second key hashtext(workflow_id)) while a definition's next version is decided: a row lock
// cannot serialize the first version, which has no row to lock yet.
const definitionsLockClass int32 = 0x5344 // "SD"

// definitionsStore implements store.WorkflowDefinitions on workflow_definitions (migration
// 00012).
type definitionsStore Store

func (d *definitionsStore) s() *Store { return (*Store)(d) }

// Definitions implements store.Store.
func (s *Store) Definitions() store.WorkflowDefinitions { return (*definitionsStore)(s) }

const definitionColumns = `workflow_id, version, definition, created_at, created_by`

func scanDefinition(row pgx.CollectableRow) (store.WorkflowDefinitionRecord, error) {
	var rec store.WorkflowDefinitionRecord
	err := row.Scan(&rec.WorkflowID, &rec.Version, &rec.Definition, &rec.CreatedAt, &rec.CreatedBy)
	rec.CreatedAt = utc(rec.CreatedAt)
	return rec, err
}

// PutDefinition implements store.WorkflowDefinitions. Under the workflow_id's advisory lock
// it reads the latest version, returns it when its bytes equal def, and otherwise inserts
// the next one; concurrent puts of one workflow_id take turns, so versions never collide
// and none is skipped.
func (d *definitionsStore) PutDefinition(ctx context.Context, workflowID string, def []byte, createdBy string) (store.WorkflowDefinitionRecord, error) {
	if workflowID == "" {
		return store.WorkflowDefinitionRecord{}, errors.New("postgres: put definition: workflow_id is required")
	}
	if def == nil {
		def = []byte{} // the column is NOT NULL; an empty definition is empty bytes
	}
	var rec store.WorkflowDefinitionRecord
	err := pgx.BeginFunc(ctx, d.s().pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, definitionsLockClass, workflowID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+definitionColumns+` FROM workflow_definitions
			WHERE workflow_id = $1 ORDER BY version DESC LIMIT 1`, workflowID)
		if err != nil {
			return err
		}
		latest, err := pgx.CollectExactlyOneRow(rows, scanDefinition)
		switch {
		case err == nil && bytes.Equal(latest.Definition, def):
			rec = latest // an idempotent retry
			return nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		rec = store.WorkflowDefinitionRecord{WorkflowID: workflowID, Version: latest.Version + 1, Definition: def, CreatedBy: createdBy}
		return tx.QueryRow(ctx, `INSERT INTO workflow_definitions (workflow_id, version, definition, created_by)
			VALUES ($1, $2, $3, $4) RETURNING created_at`,
			workflowID, rec.Version, def, createdBy).Scan(&rec.CreatedAt)
	})
	if err != nil {
		return store.WorkflowDefinitionRecord{}, fmt.Errorf("postgres: put definition %q: %w", workflowID, unavailable(err))
	}
	rec.CreatedAt = utc(rec.CreatedAt)
	rec.Definition = bytes.Clone(rec.Definition)
	return rec, nil
}

// GetDefinition implements store.WorkflowDefinitions.
func (d *definitionsStore) GetDefinition(ctx context.Context, workflowID string, version int) (store.WorkflowDefinitionRecord, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if version == 0 {
		rows, err = d.s().pool.Query(ctx, `SELECT `+definitionColumns+` FROM workflow_definitions
			WHERE workflow_id = $1 ORDER BY version DESC LIMIT 1`, workflowID)
	} else {
		rows, err = d.s().pool.Query(ctx, `SELECT `+definitionColumns+` FROM workflow_definitions
			WHERE workflow_id = $1 AND version = $2`, workflowID, version)
	}
	if err != nil {
		return store.WorkflowDefinitionRecord{}, fmt.Errorf("postgres: get definition %q version %d: %w", workflowID, version, unavailable(err))
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanDefinition)
	if err != nil {
		return store.WorkflowDefinitionRecord{}, fmt.Errorf("postgres: get definition %q version %d: %w", workflowID, version, unavailable(notFound(err)))
	}
	return rec, nil
}

// ListDefinitions implements store.WorkflowDefinitions.
func (d *definitionsStore) ListDefinitions(ctx context.Context, workflowID string) ([]store.WorkflowDefinitionRecord, error) {
	rows, err := d.s().pool.Query(ctx, `SELECT `+definitionColumns+` FROM workflow_definitions
		WHERE workflow_id = $1 ORDER BY version`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list definitions %q: %w", workflowID, unavailable(err))
	}
	recs, err := pgx.CollectRows(rows, scanDefinition)
	if err != nil {
		return nil, fmt.Errorf("postgres: list definitions %q: %w", workflowID, unavailable(err))
	}
	if recs == nil {
		recs = []store.WorkflowDefinitionRecord{}
	}
	return recs, nil
}
