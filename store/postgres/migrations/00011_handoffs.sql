-- +goose Up
-- handoff_requests is the projection of the agent handoffs (§17.6): the handoff workflow
-- handoff/<request_id> owns the state machine and records each transition here, for
-- GetPendingHandoffs, routing (open delegations per agent) and CancelDelegation. request holds
-- the HandoffRequest as received, context snapshot included, which never enters workflow
-- history. status is handoffpb.HandoffStatus. (The table "handoffs" is the outbox.) seq
-- orders handoffs created at the same instant in the order they were created.
CREATE TABLE handoff_requests (
    request_id           text        PRIMARY KEY,
    seq                  bigint      GENERATED ALWAYS AS IDENTITY,
    correlation          text        NOT NULL,
    from_agent           text        NOT NULL,
    target               text        NOT NULL DEFAULT '',
    accepted_by          text        NOT NULL DEFAULT '',
    status               integer     NOT NULL,
    request              bytea,
    context_content_type text        NOT NULL DEFAULT '',
    end_reason           text        NOT NULL DEFAULT '',
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
-- GetPendingHandoffs: the PENDING handoffs offered to one agent.
CREATE INDEX handoff_requests_target_idx ON handoff_requests (target, status);
-- CancelDelegation: every handoff of a correlation.
CREATE INDEX handoff_requests_correlation_idx ON handoff_requests (correlation);
-- OpenDelegations reads only the open handoffs (PENDING = 1, ACCEPTED = 2), a small part of
-- a table that keeps every ended one.
CREATE INDEX handoff_requests_open_idx ON handoff_requests (status) WHERE status IN (1, 2);

-- handoff_fences records that an agent handed a correlation's context away and must not
-- continue work on it (§17.6): the router refuses its messages on that correlation.
CREATE TABLE handoff_fences (
    correlation text        NOT NULL,
    agent_id    text        NOT NULL,
    request_id  text        NOT NULL,
    new_owner   text        NOT NULL,
    at          timestamptz NOT NULL,
    CONSTRAINT handoff_fences_pkey PRIMARY KEY (correlation, agent_id)
);

-- handoff_fences_generation is one row whose counter every new fence bumps in its own
-- transaction, so a frontend that sees a new generation also sees the fence (a sequence would
-- not do: nextval is visible before the fence commits). Frontends poll it to refresh the
-- fences they cache, like agent_keys_generation.
CREATE TABLE handoff_fences_generation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    generation bigint  NOT NULL
);
INSERT INTO handoff_fences_generation (singleton, generation) VALUES (true, 0);

-- +goose Down
DROP TABLE handoff_fences_generation;
DROP TABLE handoff_fences;
DROP TABLE handoff_requests;
