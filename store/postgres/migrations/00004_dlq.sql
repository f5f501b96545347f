-- +goose Up
-- dead_letters is the dead-letter queue (§21.1): one row per message that failed for good,
-- with the diagnostic context operators triage it by. message_id is the last attempt's and
-- is unique, so a retried sweep finds the row it wrote before. error_code holds a
-- sw4rm.common.ErrorCode number; attempts is the attempt history as a JSON array of
-- store.DLQAttempt; envelope is a serialized sw4rm.common.Envelope (NULL when there was
-- none); payload_excerpt holds at most the payload's first 256 bytes. requeued_at is NULL
-- until an operator requeues the entry, which happens at most once.
CREATE TABLE dead_letters (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id        text        NOT NULL,
    producer_id       text        NOT NULL DEFAULT '',
    recipient_id      text        NOT NULL DEFAULT '',
    correlation_id    text        NOT NULL DEFAULT '',
    idempotency_token text        NOT NULL DEFAULT '',
    error_code        integer     NOT NULL DEFAULT 0,
    class             text        NOT NULL,
    reason            text        NOT NULL DEFAULT '',
    attempts          json,
    envelope          bytea,
    payload_size      bigint      NOT NULL DEFAULT 0,
    content_type      text        NOT NULL DEFAULT '',
    payload_excerpt   bytea,
    first_seen_at     timestamptz,
    failed_at         timestamptz NOT NULL DEFAULT now(),
    requeued_at       timestamptz,
    requeued_as       text        NOT NULL DEFAULT '',
    CONSTRAINT dead_letters_message_id_key UNIQUE (message_id),
    CONSTRAINT dead_letters_class_check
        CHECK (class IN ('retries_exhausted', 'terminal_error', 'policy_violation', 'ttl_expired')),
    CONSTRAINT dead_letters_excerpt_check CHECK (octet_length(payload_excerpt) <= 256)
);
-- ListDeadLetters returns the newest matches in id order, by default only entries not yet
-- requeued, filtered by failure time range, class, error code, route (recipient) or producer;
-- PurgeDeadLetters deletes by failed_at.
CREATE INDEX dead_letters_open_idx ON dead_letters (id) WHERE requeued_at IS NULL;
CREATE INDEX dead_letters_failed_idx ON dead_letters (failed_at);
CREATE INDEX dead_letters_class_idx ON dead_letters (class, id);
CREATE INDEX dead_letters_error_code_idx ON dead_letters (error_code, id);
CREATE INDEX dead_letters_recipient_idx ON dead_letters (recipient_id, id);
CREATE INDEX dead_letters_producer_idx ON dead_letters (producer_id, id);

-- +goose Down
DROP TABLE dead_letters;
