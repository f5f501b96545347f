package frontend

import (
	"context"
	"encoding/json"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// loggingService serves sw4rm.logging.LoggingService: agents' own events join the same audit
// log as the server's (§19).
type loggingService struct {
	loggingpb.UnimplementedLoggingServiceServer
	s *Server
}

// Ingest records one event; details_json must be a JSON object when present.
func (l *loggingService) Ingest(ctx context.Context, ev *loggingpb.LogEvent) (*loggingpb.IngestResponse, error) {
	if ev.GetEventType() == "" {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "event_type is required (§19)")
	}
	details := map[string]any{}
	if raw := ev.GetDetailsJson(); raw != "" {
		if err := json.Unmarshal([]byte(raw), &details); err != nil {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "details_json must be a JSON object: %v", err)
		}
	}
	if ev.GetLevel() != "" {
		details["level"] = ev.GetLevel()
	}
	if ev.GetTs() != nil {
		details["agent_ts"] = ev.GetTs().AsTime().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	l.s.sink.Record(ctx, audit.Event{
		CorrelationID: ev.GetCorrelationId(), Actor: ev.GetAgentId(), AgentID: ev.GetAgentId(),
		Type: "agent." + ev.GetEventType(), Details: details,
	})
	return &loggingpb.IngestResponse{Ok: true}, nil
}
