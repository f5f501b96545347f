-- +goose Up
-- The Hybrid Logical Clock of §4 and the trace of §19 on audit rows, and the HLC on activity
-- entries (§10). hlc is the text form of protocol/hlc, padded so that text order is causal
-- order: ORDER BY hlc and max(hlc) need no parsing. '' is an older row, stamped before HLCs.
ALTER TABLE audit_events ADD COLUMN hlc text NOT NULL DEFAULT '';
ALTER TABLE audit_events ADD COLUMN trace_id text NOT NULL DEFAULT '';
-- A correlation's events in causal order (sw4rm audit --order hlc).
CREATE INDEX audit_events_correlation_hlc_idx ON audit_events (correlation_id, hlc, id) WHERE correlation_id <> '';
-- max(hlc), which seeds a starting process's clock, from the index's end.
CREATE INDEX audit_events_hlc_idx ON audit_events (hlc) WHERE hlc <> '';
ALTER TABLE activity_entries ADD COLUMN hlc text NOT NULL DEFAULT '';
ALTER TABLE activity_history ADD COLUMN hlc text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE activity_history DROP COLUMN hlc;
ALTER TABLE activity_entries DROP COLUMN hlc;
DROP INDEX audit_events_hlc_idx;
DROP INDEX audit_events_correlation_hlc_idx;
ALTER TABLE audit_events DROP COLUMN trace_id;
ALTER TABLE audit_events DROP COLUMN hlc;
