-- +goose Up
-- The W3C trace context (`traceparent`) a message was admitted in, kept with the message and
-- its delivery row, so that its delivery on the recipient's stream and its ACK continue the
-- sender's trace (§19; docs/observability.md, "Traces"). '' when tracing was off. A constant
-- default adds the columns without rewriting the tables.
ALTER TABLE messages ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deliveries DROP COLUMN traceparent;
ALTER TABLE messages DROP COLUMN traceparent;
