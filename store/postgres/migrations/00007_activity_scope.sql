-- +goose Up
-- The scheduler keeps each task's scope metadata (§9.2) and job identity (§9.2 job
-- uniqueness) on its activity entry, so that conflict analysis and duplicate-job detection
-- read the same record as PollActivityBuffer.
ALTER TABLE activity_entries ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE activity_entries ADD COLUMN job_key text NOT NULL DEFAULT '';
ALTER TABLE activity_history ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE activity_history ADD COLUMN job_key text NOT NULL DEFAULT '';
CREATE INDEX activity_entries_job_key_idx ON activity_entries (job_key) WHERE job_key <> '';

-- +goose Down
DROP INDEX activity_entries_job_key_idx;
ALTER TABLE activity_history DROP COLUMN job_key;
ALTER TABLE activity_history DROP COLUMN scope;
ALTER TABLE activity_entries DROP COLUMN job_key;
ALTER TABLE activity_entries DROP COLUMN scope;
