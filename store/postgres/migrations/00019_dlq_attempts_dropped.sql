-- +goose Up
-- A dead letter's attempt history is bounded (store.BoundAttempts, §21.1): attempts_dropped
-- counts the attempts it left out between the first and the most recent ones. The constant
-- default keeps the rows written before as they were, without rewriting the table, and lets
-- a process of the previous version insert during a rolling upgrade.
ALTER TABLE dead_letters
    ADD COLUMN attempts_dropped integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT dead_letters_attempts_dropped_check CHECK (attempts_dropped >= 0);

-- +goose Down
ALTER TABLE dead_letters DROP COLUMN attempts_dropped;
