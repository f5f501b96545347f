-- +goose Up
-- The open calls of one caller and of one provider (store.ToolCalls.OpenCalls): an agent's
-- end releases the calls it made and the calls to the tools it provides (§8.4). Partial, so
-- they hold only the calls still running, however many have ended.
CREATE INDEX tool_calls_open_caller ON tool_calls (caller) WHERE NOT final;
CREATE INDEX tool_calls_open_provider ON tool_calls (provider_id) WHERE NOT final;

-- +goose Down
DROP INDEX tool_calls_open_provider;
DROP INDEX tool_calls_open_caller;
