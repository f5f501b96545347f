package protocol

import (
	"encoding/json"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
)

// LogDetails checks an agent's LogEvent (§19) — an event_type, and details_json a JSON object
// when present — and returns the details to audit: details_json's members, with the event's
// level and the agent's own timestamp (agent_ts, UTC, microseconds) when it gave them.
func LogDetails(ev *loggingpb.LogEvent) (map[string]any, *Error) {
	if ev.GetEventType() == "" {
		return nil, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "event_type is required (§19)")
	}
	details := map[string]any{}
	if raw := ev.GetDetailsJson(); raw != "" {
		if err := json.Unmarshal([]byte(raw), &details); err != nil {
			return nil, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "details_json must be a JSON object: %v", err)
		}
	}
	if ev.GetLevel() != "" {
		details["level"] = ev.GetLevel()
	}
	if ev.GetTs() != nil {
		details["agent_ts"] = ev.GetTs().AsTime().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	return details, nil
}
