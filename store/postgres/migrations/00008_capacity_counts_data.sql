-- +goose Up
-- §13: the inbound buffer's capacity is about data. counted marks a row admitted with a
-- capacity (store.AdmitRequest.Capacity > 0: what producers send); the router's control
-- traffic (ACK forwards, NACKs, notifications) and the scheduler's CONTROL messages are
-- admitted without one and never take a slot. A constant default does not rewrite the table.
ALTER TABLE deliveries ADD COLUMN counted boolean NOT NULL DEFAULT false;

-- Rows still in a buffer keep counting as they did: every tracked message except the
-- scheduler's CONTROL messages was admitted with the capacity.
UPDATE deliveries AS d SET counted = true
FROM messages AS m
WHERE d.confirmed_at IS NULL AND m.message_id = d.message_id AND m.tracked AND m.producer_id <> 'scheduler';

-- The capacity count of an admission reads at most capacity entries of this index, whatever
-- control traffic the buffer holds; it stays index-only like the count it replaces, and only
-- data rows pay for its maintenance.
CREATE INDEX deliveries_capacity_idx ON deliveries (agent_id) WHERE confirmed_at IS NULL AND counted;

-- +goose Down
DROP INDEX deliveries_capacity_idx;
ALTER TABLE deliveries DROP COLUMN counted;
