-- +goose Up
-- The retention sweeps (store.Retention) look for the oldest finished rows of each table; these
-- partial indexes hold only the rows a sweep may delete, in the order it deletes them, so a
-- sweep reads no more than the batch it deletes however large the table. audit_events already
-- has audit_events_time_idx; dead_letters has dead_letters_failed_idx.
CREATE INDEX messages_finished_idx ON messages (updated_at) WHERE NOT tracked OR state IN (4, 5, 6, 7);
CREATE INDEX handoff_requests_ended_idx ON handoff_requests (updated_at) WHERE status NOT IN (1, 2);
CREATE INDEX handoff_fences_at_idx ON handoff_fences (at);
CREATE INDEX hitl_invocations_decided_idx ON hitl_invocations (decided_at) WHERE status = 'decided';
CREATE INDEX tool_calls_final_idx ON tool_calls (created_at) WHERE final;

-- +goose Down
DROP INDEX tool_calls_final_idx;
DROP INDEX hitl_invocations_decided_idx;
DROP INDEX handoff_fences_at_idx;
DROP INDEX handoff_requests_ended_idx;
DROP INDEX messages_finished_idx;
