package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
)

// The Approvals inbox (§15): the HITL invocations the frontend's HitlAdminService lists, in
// four tabs, each item with its context, the fallback that applies at its deadline, its audit
// trail and a form to decide it. Everything is read and decided through HitlAdminService with
// the operator's token and the door "web", so the frontend authorizes and audits it.

// Inbox tabs.
const (
	inboxPending = "pending"
	inboxDecided = "decided"
	inboxExpired = "expired"
	inboxAll     = "all"
)

// inboxTabs are the tabs in the order shown.
var inboxTabs = []struct{ Key, Label string }{
	{inboxPending, "Pending"}, {inboxDecided, "Decided"}, {inboxExpired, "Expired"}, {inboxAll, "All"},
}

// inboxDueWithin are the choices of the deadline filter.
var inboxDueWithin = []struct{ Key, Label string }{
	{"", "any time"}, {"overdue", "deadline passed"}, {"5m", "within 5 minutes"}, {"1h", "within an hour"}, {"24h", "within a day"},
}

// inboxRoutes registers the Approvals page.
func (c *Console) inboxRoutes() {
	c.mux.Handle("GET "+Prefix+"inbox", c.signedIn(c.inboxPage))
	c.mux.Handle("GET "+Prefix+"inbox/list", c.signedIn(c.inboxList))
	c.mux.Handle("GET "+Prefix+"inbox/events", c.signedIn(c.inboxEvents))
	c.mux.Handle("GET "+Prefix+"inbox/{id}", c.signedIn(c.inboxItemPage))
	c.mux.Handle("GET "+Prefix+"inbox/{id}/state", c.signedIn(c.inboxItemState))
	c.mux.Handle("POST "+Prefix+"inbox/{id}/decide", c.signedIn(c.inboxDecide))
}

// inboxFilter is what the list shows: a tab and the filters. Only Reason is applied by
// HitlAdminService.ListInvocations; the others are applied here to the fields it returns.
type inboxFilter struct {
	Tab         string
	Reason      string
	Agent       string
	MaxPriority string
	Due         string
	Correlation string
}

// inboxFilterOf reads the filter from the query; unknown values fall back to the defaults.
func inboxFilterOf(q url.Values) inboxFilter {
	f := inboxFilter{Tab: q.Get("tab"), Reason: strings.ToUpper(strings.TrimSpace(q.Get("reason"))),
		Agent: strings.TrimSpace(q.Get("agent")), MaxPriority: strings.TrimSpace(q.Get("priority")),
		Due: q.Get("due"), Correlation: strings.TrimSpace(q.Get("correlation"))}
	if !slices.ContainsFunc(inboxTabs, func(t struct{ Key, Label string }) bool { return t.Key == f.Tab }) {
		f.Tab = inboxPending
	}
	if v, ok := commonpb.HitlReasonType_value[f.Reason]; !ok || v == 0 {
		f.Reason = ""
	}
	if !slices.ContainsFunc(inboxDueWithin, func(d struct{ Key, Label string }) bool { return d.Key == f.Due }) {
		f.Due = ""
	}
	if _, err := strconv.Atoi(f.MaxPriority); err != nil {
		f.MaxPriority = ""
	}
	return f
}

// query is the filter as a query string, for links and the list's fragment.
func (f inboxFilter) query(tab string) string {
	q := url.Values{"tab": {tab}}
	for k, v := range map[string]string{"reason": f.Reason, "agent": f.Agent, "priority": f.MaxPriority, "due": f.Due, "correlation": f.Correlation} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// keep reports whether item it passes the filter (all but the reason, which the frontend
// applied).
func (f inboxFilter) keep(it inboxItem, now time.Time) bool {
	switch f.Tab {
	case inboxPending:
		if it.Status != inboxPending {
			return false
		}
	case inboxDecided, inboxExpired:
		if it.Status != f.Tab {
			return false
		}
	}
	if f.Agent != "" && !strings.Contains(strings.ToLower(it.Agent+" "+it.RequestedBy), strings.ToLower(f.Agent)) {
		return false
	}
	if p, err := strconv.Atoi(f.MaxPriority); err == nil && int(it.Priority) > p {
		return false
	}
	if f.Correlation != "" && !strings.Contains(it.Correlation, f.Correlation) {
		return false
	}
	switch f.Due {
	case "":
	case "overdue":
		if it.Status != inboxPending || it.Deadline.After(now) {
			return false
		}
	default:
		d, _ := time.ParseDuration(f.Due)
		if it.Status != inboxPending || it.Deadline.After(now.Add(d)) {
			return false
		}
	}
	return true
}

// inboxItem is one invocation as the list and the item page show it.
type inboxItem struct {
	ID, Reason, Subject, Agent, RequestedBy, Correlation string
	Priority                                             int32
	Created, Deadline                                    time.Time
	// Status is inboxPending, inboxDecided (by a person) or inboxExpired (by the fallback).
	Status string
	// StateClass and StateWord are the status badge: its colour class and its word.
	StateClass, StateWord string
	// Fallback says what happens at the deadline (pending) or what happened (expired).
	Fallback   string
	Invocation hitl.Invocation
	Outcome    *hitl.Outcome
	// Patch is a modification's patch, as text.
	Patch string
}

// Href is the item's page.
func (it inboxItem) Href() string { return Prefix + "inbox/" + urlPathEscape(it.ID) }

// RawContext is a context the requester sent in another shape than §15.1's, as text.
func (it inboxItem) RawContext() string { return string(it.Invocation.Context.Raw) }

// inboxItemOf reads an invocation the frontend returned.
func inboxItemOf(s *hitladminpb.InvocationSummary, now time.Time) inboxItem {
	it := inboxItem{ID: s.GetInvocationId(), Reason: s.GetReasonType(), Subject: s.GetSubject(), Correlation: s.GetCorrelationId(),
		Priority: s.GetPriority(), Created: s.GetCreatedAt().AsTime(), Deadline: s.GetDeadline().AsTime()}
	_ = json.Unmarshal([]byte(s.GetInvocationJson()), &it.Invocation) // a record without it still lists
	it.Agent, it.RequestedBy = it.Invocation.Subject.AgentID, it.Invocation.RequestedBy
	if it.Subject == "" {
		it.Subject = it.Invocation.Subject.String()
	}
	var o hitl.Outcome
	if s.GetStatus() == "decided" && json.Unmarshal([]byte(s.GetOutcomeJson()), &o) == nil {
		it.Outcome = &o
		it.Patch = string(o.Patch)
	}
	switch {
	case it.Outcome == nil && s.GetStatus() == "decided":
		it.Status, it.StateClass, it.StateWord = inboxDecided, "muted", "Decided"
	case it.Outcome == nil:
		it.Status, it.StateClass, it.StateWord = inboxPending, "info", "Pending"
		if !it.Deadline.After(now) {
			it.StateClass, it.StateWord = "warn", "Pending, deadline passed"
		}
		it.Fallback = fallbackText(it.Invocation.Fallback)
	case it.Outcome.Fallback:
		it.Status, it.StateClass = inboxExpired, "warn"
		it.StateWord = "Expired: " + decisionWord(it.Outcome.Decision) + " by fallback"
		it.Fallback = fmt.Sprintf("%s applied (%s): %s", orText(it.Outcome.FallbackPolicy, "fallback"), orText(it.Outcome.FallbackReason, "deadline"), it.Outcome.Decision)
	default:
		it.Status = inboxDecided
		it.StateWord = decisionWord(it.Outcome.Decision)
		switch it.Outcome.Decision {
		case hitl.Approve, hitl.Modify:
			it.StateClass = "ok"
		case hitl.Deny:
			it.StateClass = "bad"
		default:
			it.StateClass = "muted"
		}
	}
	return it
}

// decisionWord is a decision as a status word.
func decisionWord(a hitl.Action) string {
	switch a {
	case hitl.Approve:
		return "Approved"
	case hitl.Deny:
		return "Denied"
	case hitl.Modify:
		return "Modified"
	case hitl.Defer:
		return "Deferred"
	}
	return string(a)
}

// fallbackText says what happens when nobody decides before the deadline (§15.3, §15.4).
func fallbackText(f hitl.Fallback) string {
	switch f.Policy {
	case "":
		return "the deployment's fallback (SW4RM_HITL_UNAVAILABLE_POLICY; DENY_BY_DEFAULT unless set): denied unless it says otherwise"
	case hitl.DenyByDefault:
		return "DENY_BY_DEFAULT: denied at the deadline"
	case hitl.AutoDecideThreshold:
		verdict := "denied"
		if f.Score >= f.Threshold {
			verdict = "approved"
		}
		return fmt.Sprintf("AUTO_DECIDE_THRESHOLD: %s at the deadline (score %g, threshold %g)", verdict, f.Score, f.Threshold)
	case hitl.ExtendTimeout:
		n := f.MaxExtensions
		if n == 0 {
			n = hitl.DefaultMaxExtensions
		}
		by := "the original timeout"
		if f.ExtendBy > 0 {
			by = f.ExtendBy.String()
		}
		return fmt.Sprintf("EXTEND_TIMEOUT: the deadline is extended by %s, at most %d times, then denied", by, n)
	}
	return f.Policy
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// inboxData is the list page's data.
type inboxData struct {
	Filter    inboxFilter
	Tabs      []inboxTabLink
	Reasons   []string
	DueWithin []struct{ Key, Label string }
	Items     []inboxItem
	// ListURL is the list's fragment, which the event stream refreshes.
	ListURL string
	// Limited says the listing reached the frontend's limit: older invocations are not shown.
	Limited bool
	// Error is a failure of the fragment's listing.
	Error string
	// Fingerprint is inboxFingerprint when the page was read, where its stream starts.
	Fingerprint string
}

// IsItem tells the template which view this is: the list.
func (inboxData) IsItem() bool { return false }

// inboxTabLink is one tab.
type inboxTabLink struct {
	Label, Href string
	Current     bool
}

// inboxListLimit is how many invocations the page asks for (the newest are kept).
const inboxListLimit = 1000

// inboxLoad lists the invocations of the filter's tab, filtered and ordered: pending ones
// most urgent first (priority, then deadline), the others newest first.
func (c *Console) inboxLoad(ctx context.Context, s *session, f inboxFilter) (inboxData, error) {
	d := inboxData{Filter: f, DueWithin: inboxDueWithin, ListURL: Prefix + "inbox/list?" + f.query(f.Tab)}
	for _, t := range inboxTabs {
		d.Tabs = append(d.Tabs, inboxTabLink{Label: t.Label, Href: Prefix + "inbox?" + f.query(t.Key), Current: t.Key == f.Tab})
	}
	for v := int32(1); ; v++ {
		name, ok := commonpb.HitlReasonType_name[v]
		if !ok {
			break
		}
		d.Reasons = append(d.Reasons, name)
	}
	resp, err := hitladminpb.NewHitlAdminServiceClient(c.cfg.Conn).ListInvocations(outgoing(ctx, s), &hitladminpb.ListInvocationsRequest{
		IncludeDecided: f.Tab != inboxPending, ReasonType: f.Reason, Limit: inboxListLimit})
	if err != nil {
		return d, err
	}
	d.Limited = len(resp.GetInvocations()) >= inboxListLimit
	now := c.cfg.Now()
	for _, inv := range resp.GetInvocations() {
		if it := inboxItemOf(inv, now); f.keep(it, now) {
			d.Items = append(d.Items, it)
		}
	}
	if f.Tab == inboxPending {
		slices.SortStableFunc(d.Items, func(a, b inboxItem) int {
			if a.Priority != b.Priority {
				return int(a.Priority - b.Priority)
			}
			return a.Deadline.Compare(b.Deadline)
		})
	} else {
		slices.Reverse(d.Items) // the frontend lists oldest first
	}
	return d, nil
}

// inboxPage is the list, with its tabs and filters.
func (c *Console) inboxPage(w http.ResponseWriter, r *http.Request, s *session) {
	fp, _ := c.inboxFingerprint(r.Context(), s, "") // none: the stream takes its own
	d, err := c.inboxLoad(r.Context(), s, inboxFilterOf(r.URL.Query()))
	d.Fingerprint = fp
	pd := pageData{Title: "Approvals", Nav: "inbox", Flash: inboxFlash(r), Data: d}
	if err != nil {
		pd.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
	}
	c.render(w, r, s, "inbox", pd)
}

// inboxList is the list alone, the fragment the event stream refreshes.
func (c *Console) inboxList(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.inboxLoad(r.Context(), s, inboxFilterOf(r.URL.Query()))
	if err != nil {
		d.Error = callError(err)
	}
	c.renderFragment(w, "inbox", "inbox-list", pageData{Data: d})
}

// inboxEvents sends "changed" when the invocations change (a new one, a decision through any
// door, a fallback), or with ?id= when that invocation or its audit trail changes.
func (c *Console) inboxEvents(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.URL.Query().Get("id")
	serveChanges(w, r, "changed", func(ctx context.Context) (string, error) { return c.inboxFingerprint(ctx, s, id) })
}

// inboxFingerprint is a hash of what the inbox shows — every invocation's status and
// deadline, or with id that invocation's and the length of its audit trail — which the event
// streams compare. A page takes it before it reads what it shows, so that a change in between
// makes its stream refresh it rather than go unseen.
func (c *Console) inboxFingerprint(ctx context.Context, s *session, id string) (string, error) {
	client := hitladminpb.NewHitlAdminServiceClient(c.cfg.Conn)
	h := sha256.New()
	if id != "" {
		inv, err := client.GetInvocation(outgoing(ctx, s), &hitladminpb.GetInvocationRequest{InvocationId: id})
		if err != nil {
			return "", err
		}
		hist, err := client.History(outgoing(ctx, s), &hitladminpb.HistoryRequest{InvocationId: id})
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s|%s|%d|%d", inv.GetStatus(), inv.GetOutcomeJson(), inv.GetDeadline().AsTime().UnixNano(), len(hist.GetEvents()))
	} else {
		resp, err := client.ListInvocations(outgoing(ctx, s), &hitladminpb.ListInvocationsRequest{IncludeDecided: true, Limit: inboxListLimit})
		if err != nil {
			return "", err
		}
		for _, inv := range resp.GetInvocations() {
			fmt.Fprintf(h, "%s|%s|%d|%d\n", inv.GetInvocationId(), inv.GetStatus(), len(inv.GetOutcomeJson()), inv.GetDeadline().AsTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// inboxItemData is the item page's data.
type inboxItemData struct {
	Item        inboxItem
	History     []inboxEvent
	TemporalRun string
	// Form holds what the operator entered, shown again when a decision was refused.
	Form inboxForm
	// PatchHint says what a modification means for this reason type.
	PatchHint string
	// Fragment is true when the state is rendered alone for htmx.
	Fragment bool
	// Fingerprint is inboxFingerprint when the page was read, where its stream starts.
	Fingerprint string
}

// IsItem tells the template which view this is: one item.
func (inboxItemData) IsItem() bool { return true }

// StateURL is the item's state fragment.
func (d inboxItemData) StateURL() string { return d.Item.Href() + "/state" }

// EventsURL is the item's event stream.
func (d inboxItemData) EventsURL() string {
	return Prefix + "inbox/events?id=" + urlQueryEscape(d.Item.ID) + "&fp=" + urlQueryEscape(d.Fingerprint)
}

// DecideURL is where the decision form posts.
func (d inboxItemData) DecideURL() string { return d.Item.Href() + "/decide" }

// inboxForm is the decision form's values.
type inboxForm struct {
	Decision, Rationale, Patch string
}

// inboxEvent is one audit event of an item.
type inboxEvent struct {
	Time                time.Time
	Actor, Type, Via    string
	Decision, Rationale string
	Detail              string
}

// inboxLoadItem reads one invocation and its audit trail.
func (c *Console) inboxLoadItem(ctx context.Context, s *session, id string) (inboxItemData, error) {
	client := hitladminpb.NewHitlAdminServiceClient(c.cfg.Conn)
	inv, err := client.GetInvocation(outgoing(ctx, s), &hitladminpb.GetInvocationRequest{InvocationId: id})
	if err != nil {
		return inboxItemData{}, err
	}
	d := inboxItemData{Item: inboxItemOf(inv, c.cfg.Now()), TemporalRun: c.TemporalRunURL(hitl.WorkflowID(id))}
	d.PatchHint = patchHint(d.Item.Reason)
	d.Form.Patch = proposedJSON(d.Item.Invocation)
	hist, err := client.History(outgoing(ctx, s), &hitladminpb.HistoryRequest{InvocationId: id})
	if err != nil {
		return d, err
	}
	for _, e := range hist.GetEvents() {
		var det map[string]any
		_ = json.Unmarshal([]byte(e.GetDetailsJson()), &det)
		ev := inboxEvent{Time: e.GetTime().AsTime(), Actor: e.GetActor(), Type: e.GetType()}
		ev.Via, _ = det["via"].(string)
		ev.Decision, _ = det["decision"].(string)
		ev.Rationale, _ = det["rationale"].(string)
		if reason, ok := det["reason"].(string); ok {
			ev.Detail = reason
		}
		if fb, _ := det["fallback"].(bool); fb {
			ev.Detail = fmt.Sprintf("fallback %v (%v)", det["fallback_policy"], det["fallback_reason"])
		}
		d.History = append(d.History, ev)
	}
	return d, nil
}

// proposedJSON is the starting text of a modification: a tool call's arguments when its
// invocation shows them whole (hitl.ArgumentsFact), else the requester's own context when it
// sent JSON that is not the §15.1 shape, else an empty object.
func proposedJSON(inv hitl.Invocation) string {
	indent := func(raw []byte) (string, bool) {
		var v any
		if !json.Valid(raw) || json.Unmarshal(raw, &v) != nil {
			return "", false
		}
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), err == nil
	}
	if inv.ReasonType == commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION.String() {
		for _, f := range inv.Context.Facts {
			if args, ok := strings.CutPrefix(f, hitl.ArgumentsFact); ok {
				if s, ok := indent([]byte(args)); ok {
					return s
				}
			}
		}
	}
	if s, ok := indent(inv.Context.Raw); ok && len(inv.Context.Raw) > 0 {
		return s
	}
	return "{}"
}

// patchHint says what the requester does with a modification, by reason type.
func patchHint(reason string) string {
	switch reason {
	case commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION.String():
		return "For a tool call, the modification replaces the call's arguments: it must satisfy the tool's input schema, or the call is refused (validation_error)."
	case commonpb.HitlReasonType_WORKTREE_OVERRIDE.String():
		return `For a worktree switch, the modification is {"ttl_ms": n}: the switch is approved for n milliseconds.`
	case commonpb.HitlReasonType_DEBATE_DEADLOCK.String(), commonpb.HitlReasonType_MANUAL_OVERRIDE.String():
		return "For a negotiation, the modification is decided as its result."
	}
	return "The modification goes to the requester with the decision."
}

// inboxItemPage is one invocation: its context, fallback, audit trail and decision form.
func (c *Console) inboxItemPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	fp, _ := c.inboxFingerprint(r.Context(), s, id) // none: the stream takes its own
	d, err := c.inboxLoadItem(r.Context(), s, id)
	d.Fingerprint = fp
	if d.Item.ID == "" {
		d.Item.ID = id
	}
	d.Form.Decision = r.URL.Query().Get("decision")
	pd := pageData{Title: "Approval " + id, Nav: "inbox", Flash: inboxFlash(r), Data: d}
	if err != nil {
		pd.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
	}
	c.render(w, r, s, "inbox", pd)
}

// inboxItemState is the item's state and audit trail alone, which its event stream refreshes.
func (c *Console) inboxItemState(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.inboxLoadItem(r.Context(), s, r.PathValue("id"))
	d.Fragment = true
	pd := pageData{Data: d}
	if err != nil {
		pd.Error = callError(err)
	}
	c.renderFragment(w, "inbox", "inbox-state", pd)
}

// inboxDecide decides an invocation through HitlAdminService.Decide. A modification must be
// JSON: anything else is refused here with 400 and nothing is sent. The frontend checks the
// rest (a rationale, the operator's reason types, a decided invocation) and its refusal is
// shown on the item's page with the HTTP status of its code.
func (c *Console) inboxDecide(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	form := inboxForm{Decision: r.PostFormValue("decision"), Rationale: r.PostFormValue("rationale"), Patch: r.PostFormValue("patch")}
	fail := func(code int, msg string) {
		d, err := c.inboxLoadItem(r.Context(), s, id)
		if d.Item.ID == "" {
			d.Item.ID = id
		}
		if err != nil && msg == "" {
			msg = callError(err)
		}
		d.Form = form
		w.WriteHeader(code)
		c.render(w, r, s, "inbox", pageData{Title: "Approval " + id, Nav: "inbox", Error: msg, Data: d})
	}
	action, err := hitl.ParseAction(form.Decision)
	if err != nil {
		fail(http.StatusBadRequest, "validation_error: "+err.Error())
		return
	}
	req := &hitladminpb.DecideRequest{InvocationId: id, Decision: string(action), Rationale: form.Rationale}
	if action == hitl.Modify {
		patch := strings.TrimSpace(form.Patch)
		var v any
		if patch == "" {
			fail(http.StatusBadRequest, "validation_error: modify needs the modified arguments as JSON; nothing was sent")
			return
		}
		if err := json.Unmarshal([]byte(patch), &v); err != nil {
			fail(http.StatusBadRequest, "validation_error: the modified arguments are not valid JSON ("+err.Error()+"); nothing was sent")
			return
		}
		req.Patch = []byte(patch)
	}
	resp, err := hitladminpb.NewHitlAdminServiceClient(c.cfg.Conn).Decide(outgoing(r.Context(), s), req)
	if err != nil {
		fail(httpStatusOf(err), callError(err))
		return
	}
	msg := decisionWord(action) + " " + id
	var o hitl.Outcome
	if json.Unmarshal([]byte(resp.GetOutcomeJson()), &o) == nil && o.DecidedBy != "" {
		msg = fmt.Sprintf("%s %s (by %s via %s)", decisionWord(o.Decision), id, o.DecidedBy, o.Via)
	}
	if resp.GetAlreadyDecided() {
		msg += "; it had already been decided so"
	}
	http.Redirect(w, r, Prefix+"inbox/"+urlPathEscape(id)+"?flash="+urlQueryEscape(msg), http.StatusSeeOther)
}

// inboxFlash is the outcome of the last action, from the redirect's query.
func inboxFlash(r *http.Request) string {
	f := r.URL.Query().Get("flash")
	if len(f) > 300 {
		f = f[:300]
	}
	return f
}
