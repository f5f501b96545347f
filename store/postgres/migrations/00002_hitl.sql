-- +goose Up
-- hitl_invocations is the projection of HITL invocations (§15); the workflow
-- hitl/<invocation_id> is the source of truth. status is 'pending' or 'decided'. invocation and
-- outcome are json, not jsonb: validated like jsonb but kept byte for byte, so they round-trip
-- exactly and CompleteInvocation can compare outcomes by their bytes.
CREATE TABLE hitl_invocations (
    invocation_id  text        PRIMARY KEY,
    workflow_id    text        NOT NULL DEFAULT '',
    reason_type    text        NOT NULL DEFAULT '',
    correlation_id text        NOT NULL DEFAULT '',
    subject        text        NOT NULL DEFAULT '',
    priority       integer     NOT NULL DEFAULT 0,
    deadline       timestamptz,
    status         text        NOT NULL DEFAULT 'pending',
    invocation     json,
    outcome        json,
    created_at     timestamptz NOT NULL DEFAULT now(),
    decided_at     timestamptz,
    CONSTRAINT hitl_invocations_status_check CHECK (status IN ('pending', 'decided'))
);
-- ListInvocations orders by (created_at, invocation_id) and usually filters by status (the
-- operators' queue of pending invocations), sometimes by reason type as well.
CREATE INDEX hitl_invocations_status_idx ON hitl_invocations (status, created_at, invocation_id COLLATE "C");
CREATE INDEX hitl_invocations_reason_idx ON hitl_invocations (reason_type, created_at, invocation_id COLLATE "C");
CREATE INDEX hitl_invocations_created_idx ON hitl_invocations (created_at, invocation_id COLLATE "C");

-- +goose Down
DROP TABLE hitl_invocations;
