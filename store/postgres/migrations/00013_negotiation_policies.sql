-- +goose Up
-- The scheduler's negotiation policy (§17.2): the base NegotiationPolicy of
-- SetNegotiationPolicy (one row at most) and the named profiles of SetPolicyProfiles, which
-- are replaced all at once in one transaction. Each is stored as protojson (proto field
-- names) so an operator can read it with psql; set_by and set_at record who wrote it and
-- when.
CREATE TABLE negotiation_base_policy (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    policy    jsonb       NOT NULL,
    set_by    text        NOT NULL DEFAULT '',
    set_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE negotiation_policy_profiles (
    name    text        PRIMARY KEY CHECK (name <> ''),
    profile jsonb       NOT NULL,
    set_by  text        NOT NULL DEFAULT '',
    set_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE negotiation_policy_profiles;
DROP TABLE negotiation_base_policy;
