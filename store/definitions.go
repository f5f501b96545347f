package store

import (
	"context"
	"time"
)

// WorkflowDefinitionRecord is one stored version of a DAG workflow definition (§17.7).
// Definitions are immutable: a change is a new version, so a run can always name the exact
// graph it runs.
type WorkflowDefinitionRecord struct {
	// WorkflowID is the definition's workflow_id.
	WorkflowID string
	// Version numbers the definitions of one workflow_id: 1, 2, … in the order they were stored.
	Version int
	// Definition is the marshalled workflowpb.WorkflowDefinition, as the caller stored it
	// (the frontend marshals deterministically, so equal definitions have equal bytes).
	Definition []byte
	// CreatedAt is when this version was stored (set by the store).
	CreatedAt time.Time
	// CreatedBy is the principal that stored it (auth.Principal's String).
	CreatedBy string
}

// WorkflowDefinitions stores versioned DAG workflow definitions (§17.7, CreateWorkflow).
type WorkflowDefinitions interface {
	// PutDefinition stores def as the next version of workflowID (the previous version + 1,
	// starting at 1; concurrent puts get distinct, consecutive versions) and returns the
	// record as stored. When def is byte-identical to the latest version it stores nothing
	// and returns the latest instead, so a retried CreateWorkflow does not add a version.
	PutDefinition(ctx context.Context, workflowID string, def []byte, createdBy string) (WorkflowDefinitionRecord, error)
	// GetDefinition returns one version of workflowID, the latest when version is 0, or
	// ErrNotFound.
	GetDefinition(ctx context.Context, workflowID string, version int) (WorkflowDefinitionRecord, error)
	// ListDefinitions returns every version of workflowID, oldest first (none: an empty slice
	// and no error).
	ListDefinitions(ctx context.Context, workflowID string) ([]WorkflowDefinitionRecord, error)
}
