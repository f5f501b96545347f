-- +goose Up
-- The scheduler's reconciliation of the activity buffer (§10) moves the entries of tasks whose
-- workflow ended without closing them to the history, with what Temporal says of the end:
-- 'cancelled' for a cancelled workflow, 'unknown' when Temporal knows nothing of it (§10's
-- "unknown states"). Widening the check keeps every row written before valid.
ALTER TABLE activity_history
    DROP CONSTRAINT activity_history_status_check,
    ADD CONSTRAINT activity_history_status_check CHECK (status IN ('completed', 'failed', 'cancelled', 'unknown'));

-- +goose Down
DELETE FROM activity_history WHERE status IN ('cancelled', 'unknown');
ALTER TABLE activity_history
    DROP CONSTRAINT activity_history_status_check,
    ADD CONSTRAINT activity_history_status_check CHECK (status IN ('completed', 'failed'));
