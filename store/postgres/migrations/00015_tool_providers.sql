-- +goose Up
-- Tool providers and the descriptors they advertise (§18.1). A provider's descriptor set is
-- replaced whole in one transaction; the provider's row is upserted first, which locks it,
-- so two registrations of one provider take turns and never leave a mix. Each descriptor
-- is stored as protojson (proto field names) so an operator can read it with psql.
CREATE TABLE tool_providers (
    provider_id   text        PRIMARY KEY CHECK (provider_id <> ''),
    kind          text        NOT NULL DEFAULT '',
    registered_by text        NOT NULL DEFAULT '',
    registered_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tool_descriptors (
    provider_id text  NOT NULL REFERENCES tool_providers (provider_id) ON DELETE CASCADE,
    tool_name   text  NOT NULL CHECK (tool_name <> ''),
    descriptor  jsonb NOT NULL,
    PRIMARY KEY (provider_id, tool_name)
);

-- +goose Down
DROP TABLE tool_descriptors;
DROP TABLE tool_providers;
