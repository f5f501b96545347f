package frontend

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/audit"
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
	details, perr := protocol.LogDetails(ev)
	if perr != nil {
		return nil, perr
	}
	l.s.sink.Record(ctx, audit.Event{
		CorrelationID: ev.GetCorrelationId(), Actor: ev.GetAgentId(), AgentID: ev.GetAgentId(),
		Type: "agent." + ev.GetEventType(), Details: details,
	})
	return &loggingpb.IngestResponse{Ok: true}, nil
}
