package frontend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// DefaultWaitForDecision is WaitForDecision's timeout when the request names none.
const DefaultWaitForDecision = 30 * time.Second

// roomService serves sw4rm.negotiation_room.NegotiationRoomService (§17.5): one coordinator
// workflow per artifact version, room/<room_id>/<artifact_id>.
type roomService struct {
	negotiationroompb.UnimplementedNegotiationRoomServiceServer
	s *Server
}

func roomOf(id string) string {
	if id == "" {
		return workflows.DefaultRoomID
	}
	return id
}

// SubmitProposal validates the proposal and starts its coordinator. An artifact_id is unique:
// a second proposal is refused while the first is under review or once it was approved, and
// accepted as the next version after REVISION_REQUESTED (the revision loop). The
// sw4rm-hitl-unavailable-policy metadata chooses the fallback of the proposal's escalation
// (§15.4), else the deployment's applies.
func (r *roomService) SubmitProposal(ctx context.Context, req *negotiationroompb.SubmitProposalRequest) (*negotiationroompb.SubmitProposalResponse, error) {
	if perr := voting.ValidateSubmission(req.GetProposal()); perr != nil {
		return nil, perr
	}
	p := proto.Clone(req.GetProposal()).(*negotiationroompb.NegotiationProposal)
	p.NegotiationRoomId = roomOf(p.GetNegotiationRoomId())
	if p.GetCreatedAt() == nil {
		p.CreatedAt = timestamppb.Now()
	}
	for _, c := range p.GetRequestedCritics() {
		if _, err := r.s.store.Registry().GetAgent(ctx, c); errors.Is(err, store.ErrNotFound) {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "requested critic %q is not a registered agent", c)
		} else if err != nil {
			return nil, failed("registry lookup", err)
		}
	}
	fallback, err := hitlFallbackOf(incomingMD(ctx))
	if err != nil {
		return nil, err
	}
	version, err := r.nextVersion(ctx, p)
	if err != nil {
		return nil, err
	}
	err = start(ctx, r.s.temporal, workflows.RoomStartOptions(p.GetNegotiationRoomId(), p.GetArtifactId(), r.s.cfg.TaskQueue), workflows.RoomCoordinator,
		workflows.RoomInput{Proposal: p, Version: version, Policy: r.s.cfg.RoomPolicy, Timeout: r.s.cfg.RoomTimeout, HITLTimeout: r.s.cfg.HITLTimeout,
			HITLFallback: fallback})
	if classify(err) == temporalAlreadyStarted {
		return nil, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "artifact %q is already under review", p.GetArtifactId())
	}
	if err != nil {
		return nil, temporalUnavailable("start the coordinator (is Temporal reachable?)", err)
	}
	return &negotiationroompb.SubmitProposalResponse{ArtifactId: p.GetArtifactId(), NegotiationRoomId: p.GetNegotiationRoomId()}, nil
}

// nextVersion is the version a proposal of its artifact would be: 1 for a new artifact, the
// next after REVISION_REQUESTED (the revision loop); an artifact under review or approved is
// refused.
func (r *roomService) nextVersion(ctx context.Context, p *negotiationroompb.NegotiationProposal) (int, error) {
	id := workflows.RoomWorkflowID(p.GetNegotiationRoomId(), p.GetArtifactId())
	// Describe first: for a new artifact (the common case) it answers NotFound without the
	// workflow task a query needs.
	if _, derr := r.s.temporal.DescribeWorkflowExecution(ctx, id, ""); classify(derr) == temporalNotFound {
		return 1, nil
	}
	prev, err := r.state(ctx, id)
	switch {
	case protocol.CodeOf(err) == commonpb.ErrorCode_NO_ROUTE:
		return 1, nil
	case err != nil:
		return 0, err
	case !prev.Final:
		return 0, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "artifact %q (version %d) is still under review in room %q", p.GetArtifactId(), prev.Version, p.GetNegotiationRoomId())
	case prev.Decision.GetOutcome() == negotiationroompb.DecisionOutcome_APPROVED:
		return 0, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "artifact %q was approved at version %d; submit changes under a new artifact_id", p.GetArtifactId(), prev.Version)
	}
	return prev.Version + 1, nil // the producer's revision after REVISION_REQUESTED
}

// SubmitVote delivers a vote to the coordinator as an update, whose validator refuses a critic
// that was not requested, a second vote, out-of-range values and votes on decided artifacts.
func (r *roomService) SubmitVote(ctx context.Context, req *negotiationroompb.SubmitVoteRequest) (*negotiationroompb.SubmitVoteResponse, error) {
	v := req.GetVote()
	if perr := voting.ValidateVoteRequest(v); perr != nil {
		return nil, perr
	}
	id := workflows.RoomWorkflowID(roomOf(v.GetNegotiationRoomId()), v.GetArtifactId())
	_, err := update[none](ctx, r.s.temporal, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.RoomVoteUpdate, Args: []any{v}})
	if err != nil {
		return nil, roomError(r.s.settle(ctx, id, err), err, v.GetArtifactId())
	}
	return &negotiationroompb.SubmitVoteResponse{ArtifactId: v.GetArtifactId(), CriticId: v.GetCriticId()}, nil
}

// roomError maps a coordinator's answer to a vote, of class c, onto the error table with
// the reason intact.
func roomError(c temporalClass, err error, artifactID string) error {
	switch c {
	case temporalClosed, temporalClosing:
		return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "artifact %q was already decided", artifactID)
	case temporalNotFound:
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no proposal for artifact %q in this room", artifactID)
	case temporalRefused:
		app := refusalOf(err)
		switch app.Type() {
		case voting.TypeNotRequested:
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s", app.Message())
		case voting.TypeAlreadyVoted:
			return protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "%s", app.Message())
		case voting.TypeDecided:
			return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
		}
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return err
	}
	return temporalUnavailable("reach the coordinator of "+artifactID, err)
}

// state queries the latest coordinator of an artifact.
func (r *roomService) state(ctx context.Context, id string) (workflows.RoomState, error) {
	st, err := query[workflows.RoomState](ctx, r.s.temporal, id, workflows.RoomStateQuery)
	switch {
	case err == nil:
		return st, nil
	case classify(err) == temporalNotFound:
		return st, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no proposal %s", id)
	case errors.As(err, new(*protocol.Error)):
		return st, err // the state did not decode
	}
	return st, temporalUnavailable("read "+id, err)
}

// GetVotes returns the votes of an artifact's current version.
func (r *roomService) GetVotes(ctx context.Context, req *negotiationroompb.GetVotesRequest) (*negotiationroompb.GetVotesResponse, error) {
	if perr := voting.ValidateArtifactRequest(req.GetArtifactId()); perr != nil {
		return nil, perr
	}
	st, err := r.state(ctx, workflows.RoomWorkflowID(roomOf(req.GetNegotiationRoomId()), req.GetArtifactId()))
	if err != nil {
		return nil, err
	}
	return &negotiationroompb.GetVotesResponse{Votes: st.Votes, VoteCount: int32(len(st.Votes))}, nil
}

// GetDecision returns the current decision (empty while votes are awaited; ESCALATED_TO_HITL
// while a human decides).
func (r *roomService) GetDecision(ctx context.Context, req *negotiationroompb.GetDecisionRequest) (*negotiationroompb.GetDecisionResponse, error) {
	if perr := voting.ValidateArtifactRequest(req.GetArtifactId()); perr != nil {
		return nil, perr
	}
	st, err := r.state(ctx, workflows.RoomWorkflowID(roomOf(req.GetNegotiationRoomId()), req.GetArtifactId()))
	if err != nil {
		return nil, err
	}
	return &negotiationroompb.GetDecisionResponse{Decision: st.Decision}, nil
}

// WaitForDecision blocks until the artifact's decision is final or the timeout passes
// (DeadlineExceeded, naming the current state).
func (r *roomService) WaitForDecision(ctx context.Context, req *negotiationroompb.WaitForDecisionRequest) (*negotiationroompb.WaitForDecisionResponse, error) {
	if perr := voting.ValidateArtifactRequest(req.GetArtifactId()); perr != nil {
		return nil, perr
	}
	timeout := DefaultWaitForDecision
	if s := req.GetTimeoutSeconds(); s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	id := workflows.RoomWorkflowID(roomOf(req.GetNegotiationRoomId()), req.GetArtifactId())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d *negotiationroompb.NegotiationDecision
	if err := r.s.temporal.GetWorkflow(wctx, id, "").Get(wctx, &d); err != nil {
		if classify(err) == temporalNotFound {
			return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no proposal for artifact %q in this room", req.GetArtifactId())
		}
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, r.undecided(ctx, id, req.GetArtifactId(), timeout)
		}
		return nil, internalf("coordinator of %s failed: %v", req.GetArtifactId(), err)
	}
	return &negotiationroompb.WaitForDecisionResponse{Decision: d}, nil
}

// undecided is WaitForDecision's DeadlineExceeded, naming the artifact's state so far. It has
// no spec error_code: a wait that ran out is no refusal (the trailer says internal_error).
func (r *roomService) undecided(ctx context.Context, id, artifactID string, timeout time.Duration) error {
	msg := fmt.Sprintf("no final decision for %q within %s", artifactID, timeout)
	if st, serr := r.state(ctx, id); serr == nil && st.Decision != nil {
		msg += fmt.Sprintf("; current outcome %s (%s)", st.Decision.GetOutcome(), st.Decision.GetReason())
	} else if serr == nil {
		msg += fmt.Sprintf("; %d vote(s) so far", len(st.Votes))
	}
	return status.Error(codes.DeadlineExceeded, msg)
}
