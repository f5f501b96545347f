-- +goose Up
-- The outbox's table was named "handoffs", the word §17.6 uses for an agent handing work to
-- another (handoff_requests). It holds outbox entries (store.OutboxEntry), so it is named for
-- them; its rows, columns and kinds are unchanged.
ALTER TABLE handoffs RENAME TO outbox;
ALTER INDEX handoffs_pkey RENAME TO outbox_pkey;
ALTER INDEX handoffs_due_idx RENAME TO outbox_due_idx;
ALTER SEQUENCE handoffs_seq_seq RENAME TO outbox_seq_seq;
-- Processes of the previous version still running during a rolling upgrade write, claim and
-- delete through the old name; a plain view over the table is updatable, so their inserts
-- (ON CONFLICT included), claims (FOR UPDATE SKIP LOCKED) and deletes keep working until
-- the last of them is replaced. A later migration drops it.
CREATE VIEW handoffs AS SELECT * FROM outbox;

-- +goose Down
DROP VIEW handoffs;
ALTER SEQUENCE outbox_seq_seq RENAME TO handoffs_seq_seq;
ALTER INDEX outbox_due_idx RENAME TO handoffs_due_idx;
ALTER INDEX outbox_pkey RENAME TO handoffs_pkey;
ALTER TABLE outbox RENAME TO handoffs;
