-- +goose Up
-- Tool calls and their frames as they come (§18.2 CallStream), so that a client that
-- reconnects resumes after its last frame_no. A call's row holds the running totals and is
-- locked by every append, so frames are numbered without gaps whichever worker writes them,
-- and once final is set nothing more is appended (§18.6: the final frame ends the stream).
CREATE TABLE tool_calls (
    call_id     text        PRIMARY KEY CHECK (call_id <> ''),
    caller      text        NOT NULL DEFAULT '',
    provider_id text        NOT NULL DEFAULT '',
    tool_name   text        NOT NULL DEFAULT '',
    frames      bigint      NOT NULL DEFAULT 0,
    bytes       bigint      NOT NULL DEFAULT 0,
    final       boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tool_frames (
    call_id      text        NOT NULL REFERENCES tool_calls (call_id) ON DELETE CASCADE,
    frame_no     bigint      NOT NULL,
    final        boolean     NOT NULL DEFAULT false,
    content_type text        NOT NULL DEFAULT '',
    data         bytea       NOT NULL DEFAULT '',
    summary      bytea       NOT NULL DEFAULT '',
    at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (call_id, frame_no)
);

-- +goose Down
DROP TABLE tool_frames;
DROP TABLE tool_calls;
