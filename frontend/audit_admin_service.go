package frontend

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/auditadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// maxAuditListLimit bounds ListAuditEvents' limit: one answer stays a bounded read.
const maxAuditListLimit = 10000

// auditAdminService serves the extension sw4rmext.audit.v1.AuditAdminService: the audit log
// (§19) for authenticated operators (the HITL operators of Config.HITLPolicy), filtered and in
// the order of the rows, of their HLC readings (§4) or of their times.
type auditAdminService struct {
	auditadminpb.UnimplementedAuditAdminServiceServer
	s *Server
}

// ListAuditEvents lists the events that match the request's filter.
func (a *auditAdminService) ListAuditEvents(ctx context.Context, req *auditadminpb.ListAuditEventsRequest) (*auditadminpb.ListAuditEventsResponse, error) {
	if _, err := (&hitlAdminService{s: a.s}).authenticate(ctx); err != nil {
		return nil, err
	}
	f, perr := auditFilterOf(req)
	if perr != nil {
		return nil, perr
	}
	events, err := a.s.store.Audit().List(ctx, f)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	if req.GetOrder() == auditadminpb.AuditOrder_AUDIT_ORDER_TIME {
		// Wall-clock order, which hosts whose clocks disagree can make differ from both the
		// rows' and the causal order; the store keeps the id order for ties.
		slices.SortStableFunc(events, func(x, y store.Event) int { return x.Time.Compare(y.Time) })
	}
	out := &auditadminpb.ListAuditEventsResponse{Events: make([]*auditadminpb.AuditEvent, 0, len(events))}
	for _, e := range events {
		out.Events = append(out.Events, &auditadminpb.AuditEvent{
			Id: e.ID, Time: timestamppb.New(e.Time), CorrelationId: e.CorrelationID, Actor: e.Actor, Type: e.Type,
			AgentId: e.AgentID, MessageId: e.MessageID, DetailsJson: cmp.Or(string(e.Details), "{}"),
			Hlc: e.HLC, TraceId: e.TraceID,
		})
	}
	return out, nil
}

// auditFilterOf checks a ListAuditEvents request and makes it a store filter.
func auditFilterOf(req *auditadminpb.ListAuditEventsRequest) (store.AuditFilter, *protocol.Error) {
	f := store.AuditFilter{CorrelationID: req.GetCorrelationId(), AgentID: req.GetAgentId(), MessageID: req.GetMessageId(),
		TypePrefix: req.GetTypePrefix(), Limit: int(req.GetLimit())}
	if req.GetLimit() > maxAuditListLimit {
		return f, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "limit %d is more than %d", req.GetLimit(), maxAuditListLimit)
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		into *time.Time
	}{{"since", req.GetSince(), &f.Since}, {"until", req.GetUntil(), &f.Until}} {
		if t.ts == nil {
			continue
		}
		if err := t.ts.CheckValid(); err != nil {
			return f, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s: %v", t.name, err)
		}
		*t.into = t.ts.AsTime()
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return f, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "until (%s) is before since (%s)",
			f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	switch req.GetOrder() {
	case auditadminpb.AuditOrder_AUDIT_ORDER_UNSPECIFIED, auditadminpb.AuditOrder_AUDIT_ORDER_TIME:
	case auditadminpb.AuditOrder_AUDIT_ORDER_HLC:
		f.OrderByHLC = true
	default:
		return f, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "order %d is not an AuditOrder", req.GetOrder())
	}
	return f, nil
}
