package router

import (
	"context"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
)

// A message on a DAG run's correlation may deliver an event to the run (§17.7): the outbox
// entry that signals it is written with the admission, so an admitted event reaches the run
// even when Temporal is down right now (docs/dag.md, "EVENT by message").

// checkEvent refuses a malformed event, and an event this process cannot hand on (it has no
// SchedulerOutbox); otherwise it adds the event's outbox entry to the admission.
func (r *Router) checkEvent(_ context.Context, s *sending) (*protocol.Error, error) {
	env := s.env
	ev, isEvent, perr := dag.EventOf(env.GetCorrelationId(), env.GetContentType(), env.GetPayload())
	if perr != nil || !isEvent {
		return perr, nil
	}
	if r.schedOutbox == nil {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE,
			"event %q for DAG run %q: this server does not run the scheduler's inbox, which delivers events to runs", ev.Name, ev.WorkflowID), nil
	}
	s.event = &RunEvent{Envelope: env, Event: ev}
	e, err := r.schedOutbox.Entry(*s.event)
	if err != nil {
		return nil, fmt.Errorf("prepare the event's outbox entry: %w", err)
	}
	s.outbox = append(s.outbox, e)
	s.eventEntry = e
	return nil, nil
}

// eventAdmitted records the event an admitted message delivers and makes the in-line
// attempt of its outbox entry.
func (r *Router) eventAdmitted(ctx context.Context, s *sending) error {
	if s.event == nil {
		return nil
	}
	env, ev := s.env, s.event.Event
	r.sink.Record(ctx, audit.Event{
		CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "workflow.event_sent",
		AgentID: s.route.Recipient, MessageID: env.GetMessageId(), Details: map[string]any{"workflow_id": ev.WorkflowID, "event": ev.Name},
	})
	r.deliverEntry(ctx, s.eventEntry)
	return nil
}
