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
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// negotiationsLimit is how many negotiations, and how many room reviews, the page lists.
const negotiationsLimit = 50

// negotiationsMaxDraft is how much of a draft the page shows; the rest is counted.
const negotiationsMaxDraft = 4 << 10

// negotiationsRoutes registers the Negotiations page and its live updates.
func (c *Console) negotiationsRoutes() {
	c.mux.Handle("GET "+Prefix+"negotiations", c.signedIn(c.negotiationsPage))
	c.mux.Handle("GET "+Prefix+"negotiations/events", c.signedIn(c.negotiationsEvents))
}

// negotiationsView is what the page shows.
type negotiationsView struct {
	// Tab is "open", "closed" or "all"; ID the negotiation_id filter.
	Tab, ID string
	Tabs    []negotiationsTab
	// ListURL is the page's list alone (for htmx), EventsURL its live updates.
	ListURL, EventsURL string
	Negotiations       []negotiationRow
	Reviews            []reviewRow
}

// negotiationsTab is one tab of the page.
type negotiationsTab struct {
	Name, Label, URL string
	Current          bool
}

// negotiationRow is one negotiation.
type negotiationRow struct {
	ID, Topic, Mode, Opener, Status, StatusCSS string
	Participants                               string
	Round, MaxRounds                           uint32
	DecidedBy, StopReason, AbortReason, HITL   string
	Opened, Deadline                           time.Time
	Execution                                  string
	Versions                                   []versionRow
	Turns                                      []turnRow
	TemporalURL                                string
}

// versionRow is one accepted draft with its scores.
type versionRow struct {
	N                       uint32
	Author, Kind, Score, Ct string
	Draft                   string
	Evaluations             []string
}

// turnRow is one turn of a debate's transcript.
type turnRow struct {
	Round       uint32
	Agent, Text string
}

// reviewRow is one artifact under review in a negotiation room, with its votes.
type reviewRow struct {
	Room, Artifact, Execution, ExecutionCSS string
	Started, Closed                         time.Time
	Votes                                   []voteRow
	Outcome, Mean, Reason, Error            string
	TemporalURL                             string
}

// voteRow is one critic's vote.
type voteRow struct {
	Critic, Score, Confidence, Passed string
}

// negotiationsRequest is the listing the page's tab and filter ask for.
func negotiationsRequest(q url.Values) (negotiationsView, *directorypb.ListNegotiationsRequest) {
	v := negotiationsView{Tab: q.Get("tab"), ID: strings.TrimSpace(q.Get("id"))}
	if v.Tab != "closed" && v.Tab != "all" {
		v.Tab = "open"
	}
	req := &directorypb.ListNegotiationsRequest{NegotiationId: v.ID, Limit: negotiationsLimit}
	if v.Tab != "all" {
		req.State = v.Tab
	}
	keep := url.Values{"tab": {v.Tab}}
	if v.ID != "" {
		keep.Set("id", v.ID)
	}
	for _, t := range []negotiationsTab{{Name: "open", Label: "Open"}, {Name: "closed", Label: "Closed"}, {Name: "all", Label: "All"}} {
		t.URL, t.Current = Prefix+"negotiations?tab="+t.Name, t.Name == v.Tab
		v.Tabs = append(v.Tabs, t)
	}
	v.EventsURL = Prefix + "negotiations/events?" + keep.Encode()
	keep.Set("fragment", "list")
	v.ListURL = Prefix + "negotiations?" + keep.Encode()
	return v, req
}

// negotiationsPage lists negotiations with their round, scores and transcript, and the
// negotiation rooms' reviews with their votes (DirectoryService.ListNegotiations,
// NegotiationRoomService.GetVotes and GetDecision); ?fragment=list writes the lists alone.
func (c *Console) negotiationsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v, req := negotiationsRequest(q)
	d := pageData{Title: "Negotiations", Nav: "negotiations", Flash: q.Get("flash"), Data: &v}
	ctx := outgoing(r.Context(), s)
	resp, err := directorypb.NewDirectoryServiceClient(c.cfg.Conn).ListNegotiations(ctx, req)
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
	} else {
		v.EventsURL += "&fp=" + negotiationsFingerprint(resp)
		for _, n := range resp.GetNegotiations() {
			v.Negotiations = append(v.Negotiations, c.negotiationRowOf(n))
		}
		room := negotiationroompb.NewNegotiationRoomServiceClient(c.cfg.Conn)
		for _, rv := range resp.GetReviews() {
			v.Reviews = append(v.Reviews, c.reviewRowOf(ctx, room, rv))
		}
	}
	if q.Get("fragment") == "list" {
		c.renderFragment(w, "negotiations", "neg-list", d)
		return
	}
	c.render(w, r, s, "negotiations", d)
}

// negotiationsEvents sends "changed" when the listing changes: a negotiation opens, a draft,
// an evaluation or a turn lands, one closes, a review gets a vote or a decision. The page
// names its own fingerprint (fp), from which the stream starts.
func (c *Console) negotiationsEvents(w http.ResponseWriter, r *http.Request, s *session) {
	_, req := negotiationsRequest(r.URL.Query())
	serveChanges(w, r, "changed", func(ctx context.Context) (string, error) {
		resp, err := directorypb.NewDirectoryServiceClient(c.cfg.Conn).ListNegotiations(outgoing(ctx, s), req)
		if err != nil {
			return "", fmt.Errorf("%s", callError(err))
		}
		return negotiationsFingerprint(resp), nil
	})
}

// negotiationsFingerprint is a hash of what the page shows of a listing.
func negotiationsFingerprint(resp *directorypb.ListNegotiationsResponse) string {
	h := sha256.New()
	for _, n := range resp.GetNegotiations() {
		evals := 0
		for _, ver := range n.GetVersions() {
			evals += len(ver.GetEvaluations())
		}
		fmt.Fprintf(h, "n %s %s %s %d %d %d %d;", n.GetNegotiationId(), n.GetStatus(), n.GetExecutionStatus(), n.GetRound(),
			len(n.GetVersions()), evals, len(n.GetTurns()))
	}
	for _, rv := range resp.GetReviews() {
		fmt.Fprintf(h, "r %s %s %s;", rv.GetRoomId(), rv.GetArtifactId(), rv.GetExecutionStatus())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// negotiationRowOf is the page's view of a negotiation.
func (c *Console) negotiationRowOf(n *directorypb.NegotiationEntry) negotiationRow {
	row := negotiationRow{ID: n.GetNegotiationId(), Topic: n.GetTopic(), Mode: n.GetMode(), Opener: n.GetOpener(),
		Status: n.GetStatus(), StatusCSS: negotiationStatusCSS(n.GetStatus()), Participants: strings.Join(n.GetParticipants(), ", "),
		Round: n.GetRound(), MaxRounds: n.GetMaxRounds(), DecidedBy: n.GetDecidedBy(), StopReason: n.GetStopReason(),
		AbortReason: n.GetAbortReason(), HITL: n.GetHitlInvocationId(), Execution: n.GetExecutionStatus(),
		TemporalURL: c.TemporalRunURL("negotiation/" + n.GetNegotiationId())}
	if row.Status == "" {
		// The state query did not answer (no worker): Temporal's status is all there is.
		row.Status, row.StatusCSS = "unknown ("+n.GetExecutionStatus()+")", "muted"
	}
	if n.GetOpenedAt() != nil {
		row.Opened = n.GetOpenedAt().AsTime()
	}
	if n.GetDeadlineAt() != nil {
		row.Deadline = n.GetDeadlineAt().AsTime()
	}
	for _, ver := range n.GetVersions() {
		vr := versionRow{N: ver.GetN(), Author: ver.GetAuthor(), Kind: "proposal", Score: fmt.Sprintf("%.2f", ver.GetScore()), Ct: ver.GetContentType(),
			Draft: negotiationDraft(ver.GetPayload())}
		if ver.GetCounter() {
			vr.Kind = "counter-proposal"
		}
		for agent, conf := range ver.GetEvaluations() {
			e := fmt.Sprintf("%s: %.2f", agent, conf)
			if note := ver.GetNotes()[agent]; note != "" {
				e += " — " + note
			}
			vr.Evaluations = append(vr.Evaluations, e)
		}
		sort.Strings(vr.Evaluations)
		row.Versions = append(row.Versions, vr)
	}
	for _, t := range n.GetTurns() {
		row.Turns = append(row.Turns, turnRow{Round: t.GetRound(), Agent: t.GetAgent(), Text: t.GetText()})
	}
	return row
}

// reviewRowOf is the page's view of a room review, with its votes and any decision.
func (c *Console) reviewRowOf(ctx context.Context, room negotiationroompb.NegotiationRoomServiceClient, rv *directorypb.RoomReviewEntry) reviewRow {
	row := reviewRow{Room: rv.GetRoomId(), Artifact: rv.GetArtifactId(), Execution: rv.GetExecutionStatus(),
		ExecutionCSS: negotiationStatusCSS(strings.ToLower(rv.GetExecutionStatus())),
		TemporalURL:  c.TemporalRunURL("room/" + rv.GetRoomId() + "/" + rv.GetArtifactId())}
	if rv.GetStartedAt() != nil {
		row.Started = rv.GetStartedAt().AsTime()
	}
	if rv.GetClosedAt() != nil {
		row.Closed = rv.GetClosedAt().AsTime()
	}
	votes, err := room.GetVotes(ctx, &negotiationroompb.GetVotesRequest{ArtifactId: rv.GetArtifactId(), NegotiationRoomId: rv.GetRoomId()})
	if err != nil {
		row.Error = "Votes could not be read: " + callError(err)
		return row
	}
	for _, vt := range votes.GetVotes() {
		passed := "failed"
		if vt.GetPassed() {
			passed = "passed"
		}
		row.Votes = append(row.Votes, voteRow{Critic: vt.GetCriticId(), Score: fmt.Sprintf("%.1f", vt.GetScore()),
			Confidence: fmt.Sprintf("%.2f", vt.GetConfidence()), Passed: passed})
	}
	if dec, err := room.GetDecision(ctx, &negotiationroompb.GetDecisionRequest{ArtifactId: rv.GetArtifactId(), NegotiationRoomId: rv.GetRoomId()}); err == nil && dec.GetDecision() != nil {
		row.Outcome, row.Reason = dec.GetDecision().GetOutcome().String(), dec.GetDecision().GetReason()
		if a := dec.GetDecision().GetAggregatedScore(); a != nil {
			row.Mean = fmt.Sprintf("%.2f (weighted %.2f, %d votes)", a.GetMean(), a.GetWeightedMean(), a.GetVoteCount())
		}
	}
	return row
}

// negotiationDraft is how the page shows a draft: indented JSON when it is JSON, its text
// when UTF-8, else its size; at most negotiationsMaxDraft bytes. The template escapes it.
func negotiationDraft(b []byte) string {
	var out string
	switch {
	case len(b) == 0:
		return ""
	case json.Valid(b):
		var buf bytes.Buffer
		if json.Indent(&buf, b, "", "  ") == nil {
			out = buf.String()
		}
	case utf8.Valid(b):
		out = string(b)
	default:
		return fmt.Sprintf("(%d bytes, not text)", len(b))
	}
	if len(out) > negotiationsMaxDraft {
		cut := negotiationsMaxDraft
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + fmt.Sprintf("\n… (%d more bytes)", len(out)-cut)
	}
	return out
}

// negotiationStatusCSS colours a negotiation's status or a review's execution status; the
// word is always written beside it.
func negotiationStatusCSS(s string) string {
	switch s {
	case "open", "running":
		return "info"
	case "paused_for_hitl":
		return "warn"
	case "decided", "completed":
		return "ok"
	case "aborted", "failed", "terminated", "timedout", "timed_out":
		return "bad"
	}
	return "muted"
}
