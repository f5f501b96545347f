-- +goose Up
-- agent_keys holds the public keys agents prove their calls with (§6.2), one row per
-- (agent, key). Rows stay after a rotation ends them (not_after, §23) and after an operator
-- revokes them (revoked_at, revoked_by, revoke_reason), so the audit trail can name them. seq
-- orders keys added at the same instant in the order they were added.
CREATE TABLE agent_keys (
    agent_id      text        NOT NULL,
    key_id        text        NOT NULL,
    algorithm     text        NOT NULL,
    public_key    bytea       NOT NULL,
    added_at      timestamptz NOT NULL,
    not_after     timestamptz,
    revoked_at    timestamptz,
    revoked_by    text        NOT NULL DEFAULT '',
    revoke_reason text        NOT NULL DEFAULT '',
    seq           bigint      GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT agent_keys_pkey PRIMARY KEY (agent_id, key_id)
);

-- agent_keys_generation is one row whose counter every add, retirement and revocation bumps in
-- its own transaction, so a frontend that sees a new generation also sees the change (a
-- sequence would not do: nextval is visible before the change commits).
CREATE TABLE agent_keys_generation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    generation bigint  NOT NULL
);
INSERT INTO agent_keys_generation (singleton, generation) VALUES (true, 0);

-- signed_call_nonces remembers the nonces of signed calls until they can no longer be replayed
-- (§6.2 replay protection). It is UNLOGGED: every signed call writes it, and skipping the WAL
-- keeps that cheap. PostgreSQL empties an unlogged table after a crash (not after a clean
-- restart), so a call made within the clock-skew window before a crash could be replayed once
-- after it; docs/keys-admin-notes.md states the trade-off.
CREATE UNLOGGED TABLE signed_call_nonces (
    agent_id text        NOT NULL,
    nonce    text        NOT NULL,
    until    timestamptz NOT NULL,
    CONSTRAINT signed_call_nonces_pkey PRIMARY KEY (agent_id, nonce)
);

-- +goose Down
DROP TABLE signed_call_nonces;
DROP TABLE agent_keys_generation;
DROP TABLE agent_keys;
