package frontend

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	pdlq "github.com/sw4rm/sw4rm-temporal/protocol/dlq"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Requeuer re-admits a dead letter as a new attempt (§21.1) and records it as requeued; the
// router implements it. Requeue returns the new attempt's message_id. It reports an unknown
// id with an error wrapping store.ErrNotFound and an entry requeued before (also by a
// concurrent caller) with one wrapping store.ErrAlreadyRequeued; a gRPC status error keeps
// its code.
type Requeuer interface {
	Requeue(ctx context.Context, id int64) (newMessageID string, err error)
}

// DLQBundleFormat names the JSON document that Export returns.
const DLQBundleFormat = "sw4rm.dlq.bundle/v1"

// dlqAdminService serves the extension sw4rmext.dlq.v1.DlqAdminService: listing, requeuing
// and exporting dead letters for authenticated operators (the HITL operators of
// Config.HITLPolicy).
type dlqAdminService struct {
	dlqadminpb.UnimplementedDlqAdminServiceServer
	s *Server
	// requeue re-admits entries; nil makes Requeue answer Unavailable.
	requeue Requeuer
}

// authenticate finds the operator making the call — proven by the auth interceptor, or by
// its bearer token — exactly as the HITL admin service does.
func (d *dlqAdminService) authenticate(ctx context.Context) (hitl.Operator, error) {
	return (&hitlAdminService{s: d.s}).authenticate(ctx)
}

// ListDeadLetters lists the dead letters that match the filter, oldest first.
func (d *dlqAdminService) ListDeadLetters(ctx context.Context, req *dlqadminpb.ListDeadLettersRequest) (*dlqadminpb.ListDeadLettersResponse, error) {
	if _, err := d.authenticate(ctx); err != nil {
		return nil, err
	}
	f, perr := pdlq.ParseFilter(req.GetFilter())
	if perr != nil {
		return nil, perr
	}
	entries, err := d.s.store.DLQ().ListDeadLetters(ctx, f)
	if err != nil {
		return nil, dlqUnavailable(err)
	}
	out := &dlqadminpb.ListDeadLettersResponse{}
	for _, e := range entries {
		out.DeadLetters = append(out.DeadLetters, deadLetterPB(e))
	}
	return out, nil
}

// GetDeadLetter returns one dead letter, requeued or not, with its attempt history.
func (d *dlqAdminService) GetDeadLetter(ctx context.Context, req *dlqadminpb.GetDeadLetterRequest) (*dlqadminpb.GetDeadLetterResponse, error) {
	if _, err := d.authenticate(ctx); err != nil {
		return nil, err
	}
	id, perr := pdlq.ValidateGet(req)
	if perr != nil {
		return nil, perr
	}
	e, err := d.s.store.DLQ().GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown dead letter %d", id)
	}
	if err != nil {
		return nil, dlqUnavailable(err)
	}
	return &dlqadminpb.GetDeadLetterResponse{DeadLetter: deadLetterPB(e), Envelope: e.Envelope}, nil
}

// dlqUnavailable is the status of a store failure: nothing was refused, so a retry is safe.
func dlqUnavailable(err error) error {
	return status.Errorf(codes.Unavailable, "internal_error: %v", err)
}

// Requeue requeues each distinct id through the Requeuer and reports every outcome: the new
// message_id, or NOT_FOUND for an unknown id, FAILED_PRECONDITION for an entry requeued
// before. One failing entry does not stop the others. Every attempt is audited as
// dlq.requeue_requested with the operator as actor.
func (d *dlqAdminService) Requeue(ctx context.Context, req *dlqadminpb.RequeueRequest) (*dlqadminpb.RequeueResponse, error) {
	op, err := d.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	ids, perr := pdlq.ValidateRequeue(req)
	if perr != nil {
		return nil, perr
	}
	if d.requeue == nil {
		return nil, status.Error(codes.Unavailable, "requeue is not available: this server has no router to re-admit messages")
	}
	return d.requeueAll(ctx, op, ids)
}

// requeueAll requeues each id in turn, until the caller goes away.
func (d *dlqAdminService) requeueAll(ctx context.Context, op hitl.Operator, ids []int64) (*dlqadminpb.RequeueResponse, error) {
	out := &dlqadminpb.RequeueResponse{}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		out.Results = append(out.Results, d.requeueOne(ctx, op, id))
	}
	return out, nil
}

// requeueOne requeues one entry and audits the attempt.
func (d *dlqAdminService) requeueOne(ctx context.Context, op hitl.Operator, id int64) *dlqadminpb.RequeueResult {
	res := &dlqadminpb.RequeueResult{Id: id}
	fail := func(code codes.Code, format string, args ...any) {
		res.Code = dlqCodeName(code)
		res.Error = fmt.Sprintf(format, args...)
	}
	e, err := d.s.store.DLQ().GetDeadLetter(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		fail(codes.NotFound, "unknown dead letter %d", id)
		return res // nothing to audit against
	case err != nil:
		fail(codes.Unavailable, "internal_error: %v", err)
		return res
	case !e.RequeuedAt.IsZero():
		fail(codes.FailedPrecondition, "%s", dlqAlreadyRequeued(e))
	default:
		newID, err := d.requeue.Requeue(ctx, id)
		switch {
		case err == nil:
			res.MessageId = newID
		case errors.Is(err, store.ErrAlreadyRequeued):
			// A concurrent requeue won; name what it did when the entry says.
			if now, gerr := d.s.store.DLQ().GetDeadLetter(ctx, id); gerr == nil && !now.RequeuedAt.IsZero() {
				fail(codes.FailedPrecondition, "%s", dlqAlreadyRequeued(now))
			} else {
				fail(codes.FailedPrecondition, "dead letter %d was already requeued", id)
			}
		case errors.Is(err, store.ErrNotFound):
			// The entry itself may be gone (purged meanwhile), or something it needs (its
			// route) is unknown.
			if _, gerr := d.s.store.DLQ().GetDeadLetter(ctx, id); errors.Is(gerr, store.ErrNotFound) {
				fail(codes.NotFound, "unknown dead letter %d", id)
			} else {
				fail(codes.FailedPrecondition, "dead letter %d cannot be requeued: %v", id, err)
			}
		default:
			if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
				fail(st.Code(), "%s", st.Message())
			} else if ctx.Err() != nil {
				fail(status.FromContextError(ctx.Err()).Code(), "%v", err)
			} else {
				// The entry stays in the DLQ, requeueable once the cause is fixed.
				fail(codes.FailedPrecondition, "dead letter %d cannot be requeued: %v", id, err)
			}
		}
	}
	details := map[string]any{"dlq_id": id, "via": viaOf(ctx), "class": e.Class, "error_code": e.ErrorCode.String()}
	if res.Code == "" {
		details["outcome"] = "requeued"
		details["requeued_as"] = res.MessageId
	} else {
		details["outcome"] = "refused"
		details["code"] = res.Code
		details["error"] = res.Error
	}
	d.s.sink.Record(ctx, audit.Event{
		CorrelationID: e.CorrelationID, Actor: op.Name, Type: "dlq.requeue_requested",
		AgentID: e.RecipientID, MessageID: e.MessageID, Details: details,
	})
	return res
}

// dlqCodeName spells a gRPC code as its canonical upper-case name, e.g. FAILED_PRECONDITION
// for FailedPrecondition.
func dlqCodeName(c codes.Code) string {
	var b strings.Builder
	prevLower := false
	for _, r := range c.String() {
		upper := unicode.IsUpper(r)
		if upper && prevLower {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
		prevLower = unicode.IsLower(r)
	}
	return b.String()
}

// dlqAlreadyRequeued says when and as what an entry was requeued.
func dlqAlreadyRequeued(e store.DLQEntry) string {
	return fmt.Sprintf("dead letter %d was already requeued as %s at %s", e.ID, e.RequeuedAs, e.RequeuedAt.UTC().Format(time.RFC3339))
}

// viaOf names the door an operator's call came through: "cli" for the sw4rm CLI, "web" for
// the operator console (their wire.ClientKey metadata), else "grpc".
func viaOf(ctx context.Context) string {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(wire.ClientKey)) > 0 {
		switch md.Get(wire.ClientKey)[0] {
		case wire.ClientCLI:
			return "cli"
		case wire.ClientConsole:
			return "web"
		}
	}
	return "grpc"
}

// Export builds the JSON diagnostic bundle of the selected dead letters (DLQBundleFormat)
// and audits it as dlq.exported.
func (d *dlqAdminService) Export(ctx context.Context, req *dlqadminpb.ExportRequest) (*dlqadminpb.ExportResponse, error) {
	op, err := d.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	ids, f, perr := pdlq.ValidateExport(req)
	if perr != nil {
		return nil, perr
	}
	sel, entries, err := d.selectEntries(ctx, ids, f)
	if err != nil {
		return nil, err
	}
	b, err := d.bundle(ctx, op, sel, entries)
	if err != nil {
		return nil, err
	}
	d.s.sink.Record(ctx, audit.Event{Actor: op.Name, Type: "dlq.exported", Details: map[string]any{
		"count": len(entries), "ids": dlqEntryIDs(entries), "via": viaOf(ctx),
	}})
	return &dlqadminpb.ExportResponse{Bundle: b, Count: uint32(len(entries))}, nil
}

// selectEntries reads the dead letters named by ids, every one of which must exist, or else
// those matching f.
func (d *dlqAdminService) selectEntries(ctx context.Context, ids []int64, f pdlq.Filter) (dlqSelection, []store.DLQEntry, error) {
	if len(ids) == 0 {
		entries, err := d.s.store.DLQ().ListDeadLetters(ctx, f)
		if err != nil {
			return dlqSelection{}, nil, dlqUnavailable(err)
		}
		return dlqSelection{Filter: dlqSelectionOf(f)}, entries, nil
	}
	entries := make([]store.DLQEntry, 0, len(ids))
	for _, id := range ids {
		e, err := d.s.store.DLQ().GetDeadLetter(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return dlqSelection{}, nil, status.Errorf(codes.NotFound, "unknown dead letter %d", id)
		}
		if err != nil {
			return dlqSelection{}, nil, dlqUnavailable(err)
		}
		entries = append(entries, e)
	}
	return dlqSelection{IDs: ids}, entries, nil
}

// bundle renders the export bundle of entries, newline-terminated.
func (d *dlqAdminService) bundle(ctx context.Context, op hitl.Operator, sel dlqSelection, entries []store.DLQEntry) ([]byte, error) {
	bundle := dlqBundle{
		Format: DLQBundleFormat, GeneratedAt: time.Now().UTC(), GeneratedBy: op.Name, Store: d.s.store.Kind(),
		Selection: sel, Count: len(entries), Entries: make([]dlqBundleEntry, 0, len(entries)),
	}
	for _, e := range entries {
		be, err := d.bundleEntry(ctx, e)
		if err != nil {
			return nil, err
		}
		bundle.Entries = append(bundle.Entries, be)
	}
	b, err := json.MarshalIndent(bundle, "", "  ")
	if err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "encode the bundle: %v", err)
	}
	return append(b, '\n'), nil
}

func dlqEntryIDs(entries []store.DLQEntry) []int64 {
	out := make([]int64, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// deadLetterPB converts an entry for the wire (the envelope stays on the server).
func deadLetterPB(e store.DLQEntry) *dlqadminpb.DeadLetter {
	out := &dlqadminpb.DeadLetter{
		Id: e.ID, MessageId: e.MessageID, ProducerId: e.ProducerID, Route: e.RecipientID, CorrelationId: e.CorrelationID,
		IdempotencyToken: e.IdempotencyToken, ErrorCode: e.ErrorCode.String(), ErrorClass: e.Class, Reason: e.Reason,
		PayloadSize: uint64(max(e.PayloadSize, 0)), ContentType: e.ContentType, PayloadExcerpt: e.PayloadExcerpt,
		FirstSeenAt: dlqTimestamp(e.FirstSeenAt), FailedAt: dlqTimestamp(e.FailedAt), RequeuedAt: dlqTimestamp(e.RequeuedAt),
		RequeuedAs: e.RequeuedAs, AttemptsDropped: uint32(max(e.AttemptsDropped, 0)),
	}
	for _, a := range e.Attempts {
		out.Attempts = append(out.Attempts, &dlqadminpb.DeadLetterAttempt{
			MessageId: a.MessageID, At: dlqTimestamp(a.At), State: a.State, Reason: a.Reason,
			ErrorCode: a.ErrorCode, UpdatedAt: dlqTimestamp(a.UpdatedAt),
		})
	}
	return out
}

// dlqTimestamp leaves a zero time unset.
func dlqTimestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// dlqBundle is the JSON document Export returns.
type dlqBundle struct {
	// Format is DLQBundleFormat.
	Format string `json:"format"`
	// GeneratedAt and GeneratedBy (the operator) say who exported it when.
	GeneratedAt time.Time `json:"generated_at"`
	GeneratedBy string    `json:"generated_by"`
	// Store is the store kind the entries came from.
	Store string `json:"store"`
	// Selection is how the entries were selected.
	Selection dlqSelection `json:"selection"`
	// Count is len(Entries).
	Count int `json:"count"`
	// Entries are the dead letters in ID order (or in the requested id order).
	Entries []dlqBundleEntry `json:"entries"`
}

// dlqSelection records the ids or the filter of an export.
type dlqSelection struct {
	IDs    []int64             `json:"ids,omitempty"`
	Filter *dlqSelectionFilter `json:"filter,omitempty"`
}

type dlqSelectionFilter struct {
	Since           *time.Time `json:"since,omitempty"`
	Until           *time.Time `json:"until,omitempty"`
	ErrorClass      string     `json:"error_class,omitempty"`
	ErrorCode       string     `json:"error_code,omitempty"`
	Route           string     `json:"route,omitempty"`
	Producer        string     `json:"producer,omitempty"`
	IncludeRequeued bool       `json:"include_requeued"`
	Limit           int        `json:"limit,omitempty"`
}

func dlqSelectionOf(f store.DLQFilter) *dlqSelectionFilter {
	out := &dlqSelectionFilter{
		ErrorClass: f.Class, Route: f.RecipientID, Producer: f.ProducerID, IncludeRequeued: f.IncludeRequeued, Limit: f.Limit,
		Since: dlqTime(f.Since), Until: dlqTime(f.Until),
	}
	if f.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		out.ErrorCode = f.ErrorCode.String()
	}
	return out
}

// dlqBundleEntry is one dead letter with its full diagnostic context (§21.1).
type dlqBundleEntry struct {
	ID               int64              `json:"id"`
	MessageID        string             `json:"message_id"`
	ProducerID       string             `json:"producer_id"`
	Route            string             `json:"route"`
	CorrelationID    string             `json:"correlation_id"`
	IdempotencyToken string             `json:"idempotency_token,omitempty"`
	ErrorClass       string             `json:"error_class"`
	ErrorCode        string             `json:"error_code"`
	ErrorCodeNumber  int32              `json:"error_code_number"`
	Reason           string             `json:"reason"`
	FirstSeenAt      *time.Time         `json:"first_seen_at,omitempty"`
	FailedAt         time.Time          `json:"failed_at"`
	RequeuedAt       *time.Time         `json:"requeued_at,omitempty"`
	RequeuedAs       string             `json:"requeued_as,omitempty"`
	Attempts         []store.DLQAttempt `json:"attempts"`
	// AttemptsDropped counts the attempts the bounded history left out (store.BoundAttempts).
	AttemptsDropped int    `json:"attempts_dropped"`
	PayloadSize     int    `json:"payload_size"`
	ContentType     string `json:"content_type"`
	// PayloadExcerpt is base64 (JSON's encoding of bytes); PayloadExcerptText repeats it as
	// text when it is valid UTF-8.
	PayloadExcerpt     []byte `json:"payload_excerpt"`
	PayloadExcerptText string `json:"payload_excerpt_text,omitempty"`
	// Envelope is the envelope's headers as protojson, the payload left out (see
	// PayloadSize and PayloadExcerpt).
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// Audit is every audit event of the entry's messages (its attempts and its requeue) and
	// of its correlation id, in event order.
	Audit []dlqBundleEvent `json:"audit"`
}

// dlqBundleEvent is one audit event (§19).
type dlqBundleEvent struct {
	ID            int64           `json:"id"`
	Time          time.Time       `json:"time"`
	Type          string          `json:"type"`
	Actor         string          `json:"actor,omitempty"`
	AgentID       string          `json:"agent_id,omitempty"`
	MessageID     string          `json:"message_id,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	Details       json.RawMessage `json:"details,omitempty"`
}

// bundleEntry assembles the diagnostic context of one entry, audit events included.
func (d *dlqAdminService) bundleEntry(ctx context.Context, e store.DLQEntry) (dlqBundleEntry, error) {
	be := dlqBundleEntry{
		ID: e.ID, MessageID: e.MessageID, ProducerID: e.ProducerID, Route: e.RecipientID, CorrelationID: e.CorrelationID,
		IdempotencyToken: e.IdempotencyToken, ErrorClass: e.Class, ErrorCode: e.ErrorCode.String(), ErrorCodeNumber: int32(e.ErrorCode),
		Reason: e.Reason, FirstSeenAt: dlqTime(e.FirstSeenAt), FailedAt: e.FailedAt.UTC(), RequeuedAt: dlqTime(e.RequeuedAt),
		RequeuedAs: e.RequeuedAs, Attempts: e.Attempts, AttemptsDropped: e.AttemptsDropped, PayloadSize: e.PayloadSize, ContentType: e.ContentType,
		PayloadExcerpt: e.PayloadExcerpt, Audit: []dlqBundleEvent{},
	}
	if be.Attempts == nil {
		be.Attempts = []store.DLQAttempt{}
	}
	if len(e.PayloadExcerpt) > 0 && utf8.Valid(e.PayloadExcerpt) {
		be.PayloadExcerptText = string(e.PayloadExcerpt)
	}
	if e.Envelope != nil {
		env := proto.Clone(e.Envelope).(*commonpb.Envelope)
		env.Payload = nil
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(env)
		if err != nil {
			return dlqBundleEntry{}, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "encode the envelope of dead letter %d: %v", e.ID, err)
		}
		be.Envelope = b
	}

	// The audit events of every message the entry names, and of its flow.
	var filters []store.AuditFilter
	seenMsg := map[string]bool{}
	addMsg := func(id string) {
		if id != "" && !seenMsg[id] {
			seenMsg[id] = true
			filters = append(filters, store.AuditFilter{MessageID: id})
		}
	}
	addMsg(e.MessageID)
	for _, a := range e.Attempts {
		addMsg(a.MessageID)
	}
	addMsg(e.RequeuedAs)
	if e.CorrelationID != "" {
		filters = append(filters, store.AuditFilter{CorrelationID: e.CorrelationID})
	}
	seen := map[int64]bool{}
	for _, f := range filters {
		evs, err := d.s.store.Audit().List(ctx, f)
		if err != nil {
			return dlqBundleEntry{}, status.Errorf(codes.Unavailable, "internal_error: audit events of dead letter %d: %v", e.ID, err)
		}
		for _, ev := range evs {
			if seen[ev.ID] {
				continue
			}
			seen[ev.ID] = true
			be.Audit = append(be.Audit, dlqEvent(ev))
		}
	}
	slices.SortFunc(be.Audit, func(a, b dlqBundleEvent) int { return cmp.Compare(a.ID, b.ID) })
	return be, nil
}

func dlqEvent(ev store.Event) dlqBundleEvent {
	out := dlqBundleEvent{
		ID: ev.ID, Time: ev.Time.UTC(), Type: ev.Type, Actor: ev.Actor, AgentID: ev.AgentID,
		MessageID: ev.MessageID, CorrelationID: ev.CorrelationID,
	}
	if len(ev.Details) > 0 {
		if json.Valid(ev.Details) {
			out.Details = ev.Details
		} else if b, err := json.Marshal(string(ev.Details)); err == nil {
			out.Details = b // kept as a JSON string
		}
	}
	return out
}

// dlqTime leaves a zero time out (nil), else gives it in UTC.
func dlqTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
