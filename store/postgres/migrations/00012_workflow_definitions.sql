-- +goose Up
-- workflow_definitions keeps every version of every DAG workflow definition (§17.7,
-- CreateWorkflow). A version is immutable; a change is the next version. definition is the
-- marshalled workflowpb.WorkflowDefinition (deterministic marshalling, so a retry of the same
-- definition has the same bytes and is recognised). Versions are decided under a per-
-- workflow_id advisory lock (definitions.go); the primary key backs that up.
CREATE TABLE workflow_definitions (
    workflow_id text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    definition  bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL DEFAULT '',
    CONSTRAINT workflow_definitions_pkey PRIMARY KEY (workflow_id, version)
);

-- +goose Down
DROP TABLE workflow_definitions;
