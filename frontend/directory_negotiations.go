package frontend

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// negotiationQueries bounds the state queries one ListNegotiations runs at once, and
// negotiationQueryTimeout each one's wait.
const (
	negotiationQueries      = 8
	negotiationQueryTimeout = 3 * time.Second
)

// ListNegotiations lists negotiations (§17) and negotiation-room reviews (§17.5) through
// Temporal's visibility: each lives only in Temporal (negotiation/<id>, room/<room>/<artifact>),
// and visibility is what lists workflows. Each negotiation's round, scores and transcript
// come from its state query, asked of the listed execution; a negotiation whose query fails
// or takes longer than negotiationQueryTimeout (its worker is away) is listed with its
// execution status alone rather than failing the listing. Only operators call it (the authorization rule), so nothing is filtered by caller.
func (d *directoryService) ListNegotiations(ctx context.Context, req *directorypb.ListNegotiationsRequest) (*directorypb.ListNegotiationsResponse, error) {
	if perr := protocol.ValidateListNegotiations(req); perr != nil {
		return nil, perr
	}
	limit := protocol.ListLimit(req.GetLimit())
	// The filters are of the id charset and a fixed list of states
	// (ValidateListNegotiations), so quoting them in the query needs no escaping.
	status := ""
	switch req.GetState() {
	case "open":
		status = " AND ExecutionStatus = 'Running'"
	case "closed":
		status = " AND ExecutionStatus != 'Running'"
	}
	q := "SW4RMKind = '" + workflows.KindNegotiation + "'" + status
	if id := req.GetNegotiationId(); id != "" {
		q += " AND WorkflowId = '" + workflows.NegotiationWorkflowID(id) + "'"
	}
	out := &directorypb.ListNegotiationsResponse{}
	negs, err := d.listExecutions(ctx, q, limit)
	if err != nil {
		return nil, temporalUnavailable("list the negotiations", err)
	}
	// The state queries run side by side, each bounded: a query waits for a worker, and a
	// negotiation whose worker is away must not hold up the whole listing.
	out.Negotiations = make([]*directorypb.NegotiationEntry, len(negs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, negotiationQueries)
	for i, ex := range negs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out.Negotiations[i] = d.negotiationEntry(ctx, ex)
		}()
	}
	wg.Wait()
	if req.GetNegotiationId() != "" {
		return out, nil
	}
	rooms, err := d.listExecutions(ctx, "SW4RMKind = '"+workflows.KindRoom+"'"+status, limit)
	if err != nil {
		return nil, temporalUnavailable("list the room reviews", err)
	}
	for _, ex := range rooms {
		out.Reviews = append(out.Reviews, roomReviewEntry(ex))
	}
	return out, nil
}

// listExecutions reads at most limit executions matching q from visibility, in its order.
func (d *directoryService) listExecutions(ctx context.Context, q string, limit int) ([]*workflow.WorkflowExecutionInfo, error) {
	var out []*workflow.WorkflowExecutionInfo
	var token []byte
	for len(out) < limit {
		resp, err := d.s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: q, PageSize: int32(limit - len(out)), NextPageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetExecutions()...)
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return out[:min(len(out), limit)], nil
}

// negotiationEntry is a listed negotiation with what its state query answers.
func (d *directoryService) negotiationEntry(ctx context.Context, ex *workflow.WorkflowExecutionInfo) *directorypb.NegotiationEntry {
	wid := ex.GetExecution().GetWorkflowId()
	id, _ := strings.CutPrefix(wid, workflows.NegotiationWorkflowID(""))
	e := &directorypb.NegotiationEntry{NegotiationId: id, ExecutionStatus: ex.GetStatus().String(), OpenedAt: ex.GetStartTime()}
	qctx, cancel := context.WithTimeout(ctx, negotiationQueryTimeout)
	defer cancel()
	v, err := d.s.temporal.QueryWorkflow(qctx, wid, ex.GetExecution().GetRunId(), workflows.NegotiationStateQuery)
	if err != nil {
		return e
	}
	var st workflows.NegotiationState
	if v.Get(&st) != nil {
		return e
	}
	e.Topic, e.Mode, e.Participants, e.Opener, e.Status = st.Topic, st.Mode, st.Participants, st.Opener, st.Status
	e.MaxRounds = st.Effective.GetPolicy().GetMaxRounds()
	e.AbortReason, e.HitlInvocationId = st.AbortReason, st.HITLInvocationID
	e.DecidedBy, e.StopReason = st.Decision.GetDecidedBy(), st.Decision.GetStopReason()
	e.OpenedAt, e.DeadlineAt = timestampOrNil(st.OpenedAt), timestampOrNil(st.DeadlineAt)
	for _, ver := range st.Versions {
		e.Versions = append(e.Versions, &directorypb.NegotiationVersionEntry{N: uint32(max(ver.N, 0)), Author: ver.Author, Counter: ver.Counter,
			ContentType: ver.ContentType, Payload: ver.Payload, Score: ver.Score, Evaluations: ver.Evaluations, Notes: ver.Notes})
	}
	e.Round = uint32(len(st.Versions))
	for _, t := range st.Turns {
		e.Turns = append(e.Turns, &directorypb.DebateTurnEntry{Round: uint32(max(t.Round, 0)), Agent: t.Agent, Text: t.Text})
		if st.Mode == workflows.NegotiationModeDebate {
			e.Round = max(e.Round, uint32(max(t.Round, 0)))
		}
	}
	return e
}

// roomReviewEntry is a listed room coordinator: its room from the search attribute, its
// artifact from the rest of its workflow ID (room/<room_id>/<artifact_id>).
func roomReviewEntry(ex *workflow.WorkflowExecutionInfo) *directorypb.RoomReviewEntry {
	r := &directorypb.RoomReviewEntry{ExecutionStatus: ex.GetStatus().String(), StartedAt: ex.GetStartTime()}
	if v, ok := ex.GetSearchAttributes().GetIndexedFields()[workflows.RoomIDKey.GetName()]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(v, &r.RoomId) // a keyword; unreadable leaves it empty
	}
	r.ArtifactId, _ = strings.CutPrefix(ex.GetExecution().GetWorkflowId(), workflows.RoomWorkflowID(r.RoomId, ""))
	r.ClosedAt = ex.GetCloseTime()
	return r
}
