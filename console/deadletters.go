package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// deadLettersMaxBundle is the largest export bundle the page accepts from the frontend
// (gRPC's default of 4 MiB is too small for a bundle of many entries with their audit).
const deadLettersMaxBundle = 256 << 20

// deadLettersClasses are the error classes of §21.1 the filter offers (protocol/dlq).
var deadLettersClasses = []string{"retries_exhausted", "terminal_error", "policy_violation", "ttl_expired"}

// deadLettersRoutes registers the Dead letters page: the filtered list, one entry's
// inspection, its live updates, and the requeue and export actions.
func (c *Console) deadLettersRoutes() {
	c.mux.Handle("GET "+Prefix+"dead-letters", c.signedIn(c.deadLettersPage))
	c.mux.Handle("GET "+Prefix+"dead-letters/events", c.signedIn(c.deadLettersEvents))
	c.mux.Handle("GET "+Prefix+"dead-letters/{id}", c.signedIn(c.deadLetterPage))
	c.mux.Handle("POST "+Prefix+"dead-letters/requeue", c.signedIn(c.deadLettersRequeue))
	c.mux.Handle("POST "+Prefix+"dead-letters/export", c.signedIn(c.deadLettersExport))
}

// deadLettersView is what the list shows: the filter as typed, and the entries.
type deadLettersView struct {
	Class, Code, Route, Producer, Since, Until, Limit string
	All                                               bool
	Classes                                           []string
	// Back is this list's URL, ListURL its list alone (for htmx) and EventsURL its live
	// updates; all keep the filter.
	Back, ListURL, EventsURL string
	Rows                     []deadLetterRow
}

// deadLetterRow is one dead letter as the page shows it.
type deadLetterRow struct {
	ID                                             int64
	MessageID, Producer, Route, Correlation, Token string
	Class, ClassCSS, Code, Reason, ContentType     string
	Attempts                                       int
	Size                                           uint64
	FirstSeen, Failed, Requeued                    time.Time
	RequeuedAs                                     string
	Payload, PayloadKind                           string
	History                                        []deadLetterAttempt
	Dropped                                        int
	URL                                            string
	// Envelope is the whole envelope's fields as indented JSON, the payload left out (the
	// excerpt shows it); empty on the list, which does not read it.
	Envelope string
}

// deadLetterAttempt is one line of an entry's attempt history: N is the attempt's place in
// the operation, Gap marks where a bounded history left attempts out before it.
type deadLetterAttempt struct {
	N, Gap                                   int
	MessageID, State, StateCSS, Code, Reason string
	At, Updated                              time.Time
}

// deadLettersFilter reads the page's filter from the query: the fields of
// DlqAdminService's DeadLetterFilter. A time that does not parse is a validation_error, as
// the service words its own refusals; the rest the service checks.
func deadLettersFilter(q url.Values) (deadLettersView, *dlqadminpb.DeadLetterFilter, error) {
	v := deadLettersView{Class: strings.TrimSpace(q.Get("class")), Code: strings.TrimSpace(q.Get("code")),
		Route: strings.TrimSpace(q.Get("route")), Producer: strings.TrimSpace(q.Get("producer")),
		Since: strings.TrimSpace(q.Get("since")), Until: strings.TrimSpace(q.Get("until")),
		Limit: strings.TrimSpace(q.Get("limit")), All: q.Get("all") != "", Classes: deadLettersClasses}
	f := &dlqadminpb.DeadLetterFilter{ErrorClass: v.Class, ErrorCode: v.Code, Route: v.Route, Producer: v.Producer, IncludeRequeued: v.All}
	var err error
	if f.Since, err = deadLettersTime("since", v.Since); err != nil {
		return v, nil, err
	}
	if f.Until, err = deadLettersTime("until", v.Until); err != nil {
		return v, nil, err
	}
	if v.Limit != "" {
		n, perr := strconv.ParseUint(v.Limit, 10, 32)
		if perr != nil {
			return v, nil, fmt.Errorf("validation_error: limit %q is not a whole number", v.Limit)
		}
		f.Limit = uint32(n)
	}
	keep := url.Values{}
	for _, k := range []string{"class", "code", "route", "producer", "since", "until", "limit", "all"} {
		if x := strings.TrimSpace(q.Get(k)); x != "" {
			keep.Set(k, x)
		}
	}
	v.Back, v.EventsURL = Prefix+"dead-letters", Prefix+"dead-letters/events"
	if len(keep) > 0 {
		v.Back += "?" + keep.Encode()
		v.EventsURL += "?" + keep.Encode()
	}
	keep.Set("fragment", "list")
	v.ListURL = Prefix + "dead-letters?" + keep.Encode()
	return v, f, nil
}

// deadLettersTime parses a time of the filter: RFC 3339, or a browser's datetime-local
// value (taken as UTC, as the page says).
func deadLettersTime(field, s string) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return timestamppb.New(t), nil
		}
	}
	return nil, fmt.Errorf("validation_error: %s %q is not a time (want e.g. 2026-01-02T15:04 in UTC, or RFC 3339)", field, s)
}

// deadLettersList reads the dead letters the filter selects, through the frontend.
func (c *Console) deadLettersList(ctx context.Context, s *session, f *dlqadminpb.DeadLetterFilter) ([]*dlqadminpb.DeadLetter, error) {
	resp, err := dlqadminpb.NewDlqAdminServiceClient(c.cfg.Conn).ListDeadLetters(outgoing(ctx, s), &dlqadminpb.ListDeadLettersRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	return resp.GetDeadLetters(), nil
}

// deadLettersPage lists the dead letters that match the filter; with ?fragment=list it
// writes the list alone, for the live updates.
func (c *Console) deadLettersPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v, f, err := deadLettersFilter(q)
	d := pageData{Title: "Dead letters", Nav: "dead-letters", Flash: q.Get("flash"), Data: &v}
	if err == nil {
		var entries []*dlqadminpb.DeadLetter
		if entries, err = c.deadLettersList(r.Context(), s, f); err == nil {
			v.EventsURL = deadLettersWithFP(v.EventsURL, deadLettersFingerprint(entries))
			for _, e := range entries {
				v.Rows = append(v.Rows, deadLetterRowOf(e))
			}
		} else {
			d.Error = callError(err)
			w.WriteHeader(httpStatusOf(err))
		}
	} else {
		d.Error = err.Error()
		w.WriteHeader(http.StatusBadRequest)
	}
	if q.Get("fragment") == "list" {
		c.renderFragment(w, "deadletters", "dl-list", d)
		return
	}
	c.render(w, r, s, "deadletters", d)
}

// deadLettersEvents sends "changed" when the filtered list changes: an entry arrives, is
// requeued (by any door) or ages out.
func (c *Console) deadLettersEvents(w http.ResponseWriter, r *http.Request, s *session) {
	_, f, err := deadLettersFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	serveChanges(w, r, "changed", func(ctx context.Context) (string, error) {
		entries, err := c.deadLettersList(ctx, s, f)
		if err != nil {
			return "", fmt.Errorf("%s", callError(err))
		}
		return deadLettersFingerprint(entries), nil
	})
}

// deadLettersFingerprint is a hash of what the list shows that can change.
func deadLettersFingerprint(entries []*dlqadminpb.DeadLetter) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%d/%s/%s;", e.GetId(), e.GetMessageId(), e.GetRequeuedAs())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// deadLettersWithFP adds the page's fingerprint to its events URL.
func deadLettersWithFP(u, fp string) string {
	if strings.Contains(u, "?") {
		return u + "&fp=" + fp
	}
	return u + "?fp=" + fp
}

// deadLetterPage inspects one dead letter: its envelope's fields, its payload's first bytes
// as text (pretty JSON when they are JSON), and its attempt history.
func (c *Console) deadLetterPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := pageData{Title: "Dead letter", Nav: "dead-letters", Flash: r.URL.Query().Get("flash")}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		d.Error = fmt.Sprintf("validation_error: %q is not a dead letter id, a positive integer", r.PathValue("id"))
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, r, s, "deadletter", d)
		return
	}
	d.Title = fmt.Sprintf("Dead letter %d", id)
	resp, err := dlqadminpb.NewDlqAdminServiceClient(c.cfg.Conn).GetDeadLetter(outgoing(r.Context(), s), &dlqadminpb.GetDeadLetterRequest{Id: id})
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
		c.render(w, r, s, "deadletter", d)
		return
	}
	row := deadLetterRowOf(resp.GetDeadLetter())
	row.Envelope = deadLetterEnvelope(resp.GetEnvelope())
	d.Data = &row
	c.render(w, r, s, "deadletter", d)
}

// deadLetterRowOf is the page's view of a dead letter.
func deadLetterRowOf(e *dlqadminpb.DeadLetter) deadLetterRow {
	row := deadLetterRow{ID: e.GetId(), MessageID: e.GetMessageId(), Producer: e.GetProducerId(), Route: e.GetRoute(),
		Correlation: e.GetCorrelationId(), Token: e.GetIdempotencyToken(), Class: e.GetErrorClass(), ClassCSS: deadLetterClassCSS(e.GetErrorClass()),
		Code: e.GetErrorCode(), Reason: e.GetReason(), ContentType: e.GetContentType(), Size: e.GetPayloadSize(),
		Attempts: len(e.GetAttempts()) + int(e.GetAttemptsDropped()), Dropped: int(e.GetAttemptsDropped()),
		FirstSeen: deadLetterTime(e.GetFirstSeenAt()), Failed: deadLetterTime(e.GetFailedAt()), Requeued: deadLetterTime(e.GetRequeuedAt()),
		RequeuedAs: e.GetRequeuedAs(), URL: fmt.Sprintf("%sdead-letters/%d", Prefix, e.GetId())}
	row.Payload, row.PayloadKind = deadLetterPayload(e.GetPayloadExcerpt(), e.GetPayloadSize())
	for i, a := range e.GetAttempts() {
		at := deadLetterAttempt{N: i + 1, MessageID: a.GetMessageId(), State: a.GetState(), StateCSS: deadLetterStateCSS(a.GetState()),
			Code: a.GetErrorCode(), Reason: a.GetReason(), At: deadLetterTime(a.GetAt()), Updated: deadLetterTime(a.GetUpdatedAt())}
		// A bounded history keeps the first DLQAttemptsHead attempts and the last ones; the
		// ones after the gap are numbered by their place in the whole operation.
		if row.Dropped > 0 && i >= store.DLQAttemptsHead {
			if i == store.DLQAttemptsHead {
				at.Gap = row.Dropped
			}
			at.N += row.Dropped
		}
		row.History = append(row.History, at)
	}
	return row
}

// deadLetterEnvelope is an envelope's fields as indented JSON (protobuf's JSON mapping), its
// payload left out; "" for none.
func deadLetterEnvelope(env *commonpb.Envelope) string {
	if env == nil {
		return ""
	}
	env = proto.CloneOf(env)
	env.Payload = nil
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(env)
	if err != nil {
		return ""
	}
	return string(b)
}

// deadLetterPayload is how the page shows a payload's first bytes: indented JSON when they
// are a whole JSON document, text when they are UTF-8, else hex. The template escapes it.
func deadLetterPayload(b []byte, size uint64) (text, kind string) {
	switch {
	case len(b) == 0:
		return "", "empty"
	case json.Valid(b):
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return out.String(), "JSON"
		}
	case !utf8.Valid(b):
		return hex.Dump(b), "bytes (hex)"
	}
	if uint64(len(b)) < size {
		return string(b), fmt.Sprintf("text, the first %d of %d bytes", len(b), size)
	}
	return string(b), "text"
}

func deadLetterTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// deadLetterClassCSS colours an error class; the class's name is always written beside it.
func deadLetterClassCSS(class string) string {
	switch class {
	case "retries_exhausted", "ttl_expired":
		return "warn"
	case "terminal_error", "policy_violation":
		return "bad"
	}
	return "muted"
}

// deadLetterStateCSS colours an attempt's envelope state.
func deadLetterStateCSS(state string) string {
	switch state {
	case "ACKNOWLEDGED", "FULFILLED", "RECEIVED", "READ":
		return "ok"
	case "FAILED", "REJECTED":
		return "bad"
	case "TIMED_OUT":
		return "warn"
	}
	return "info"
}

// deadLettersIDs reads the form's dead letter ids (the checkboxes of the list, or the one of
// an inspected entry).
func deadLettersIDs(r *http.Request) ([]int64, error) {
	var ids []int64
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("validation_error: %q is not a dead letter id, a positive integer", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// deadLettersBack is where a form goes back to: the list with the filter it was posted from,
// or the inspected entry — a console path of this page, never elsewhere.
func deadLettersBack(r *http.Request, flash string) string {
	back := r.PostForm.Get("back")
	if !strings.HasPrefix(back, Prefix+"dead-letters") || strings.ContainsAny(back, "\\\r\n") {
		back = Prefix + "dead-letters"
	}
	u, err := url.Parse(back)
	if err != nil {
		u = &url.URL{Path: Prefix + "dead-letters"}
	}
	q := u.Query()
	q.Set("flash", flash)
	u.RawQuery = q.Encode()
	return u.String()
}

// deadLettersRequeue requeues the selected dead letters (DlqAdminService.Requeue, audited as
// the operator's, door web) and goes back with each outcome: the new message id, or why not.
func (c *Console) deadLettersRequeue(w http.ResponseWriter, r *http.Request, s *session) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "validation_error: the form could not be read", http.StatusBadRequest)
		return
	}
	ids, err := deadLettersIDs(r)
	if err == nil {
		var resp *dlqadminpb.RequeueResponse
		resp, err = dlqadminpb.NewDlqAdminServiceClient(c.cfg.Conn).Requeue(outgoing(r.Context(), s), &dlqadminpb.RequeueRequest{Ids: ids})
		if err == nil {
			var out []string
			for _, res := range resp.GetResults() {
				if res.GetCode() == "" {
					out = append(out, fmt.Sprintf("Dead letter %d requeued as message %s.", res.GetId(), res.GetMessageId()))
				} else {
					out = append(out, fmt.Sprintf("Dead letter %d not requeued (%s): %s.", res.GetId(), res.GetCode(), res.GetError()))
				}
			}
			http.Redirect(w, r, deadLettersBack(r, strings.Join(out, " ")), http.StatusSeeOther)
			return
		}
		c.deadLettersRefused(w, r, s, httpStatusOf(err), callError(err))
		return
	}
	c.deadLettersRefused(w, r, s, http.StatusBadRequest, err.Error())
}

// deadLettersRefused answers a refused form with the list and the refusal.
func (c *Console) deadLettersRefused(w http.ResponseWriter, r *http.Request, s *session, code int, msg string) {
	w.WriteHeader(code)
	c.render(w, r, s, "deadletters", pageData{Title: "Dead letters", Nav: "dead-letters", Error: msg,
		Data: &deadLettersView{Classes: deadLettersClasses}})
}

// deadLettersExport downloads the JSON diagnostic bundle (DlqAdminService.Export, audited)
// of the selected dead letters, or of those the posted filter matches when none is selected.
func (c *Console) deadLettersExport(w http.ResponseWriter, r *http.Request, s *session) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "validation_error: the form could not be read", http.StatusBadRequest)
		return
	}
	ids, err := deadLettersIDs(r)
	if err != nil {
		c.deadLettersRefused(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	req := &dlqadminpb.ExportRequest{Ids: ids}
	if len(ids) == 0 {
		_, f, err := deadLettersFilter(r.PostForm)
		if err != nil {
			c.deadLettersRefused(w, r, s, http.StatusBadRequest, err.Error())
			return
		}
		req.Filter = f
	}
	resp, err := dlqadminpb.NewDlqAdminServiceClient(c.cfg.Conn).Export(outgoing(r.Context(), s), req, grpc.MaxCallRecvMsgSize(deadLettersMaxBundle))
	if err != nil {
		c.deadLettersRefused(w, r, s, httpStatusOf(err), callError(err))
		return
	}
	name := "sw4rm-dead-letters-" + c.cfg.Now().UTC().Format("20060102T150405Z") + ".json"
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(resp.GetBundle())))
	_, _ = w.Write(resp.GetBundle())
}
