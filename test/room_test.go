package test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// room is a producer with three critic agents on one system.
type room struct {
	sys      *system
	rc       negotiationroompb.NegotiationRoomServiceClient
	producer *sdk.Agent
	prodIn   *inbox
	critics  []*sdk.Agent
	inboxes  []*inbox
	roomID   string
}

func newRoom(t *testing.T, sys *system) *room {
	t.Helper()
	r := &room{sys: sys, rc: negotiationroompb.NewNegotiationRoomServiceClient(dialRaw(t, sys)), roomID: uniq(t, "room")}
	r.producer = dialAgent(t, sys, "producer")
	r.prodIn = openInbox(t, r.producer)
	for _, name := range []string{"tests", "style", "security"} {
		c := dialAgent(t, sys, name)
		r.critics = append(r.critics, c)
		r.inboxes = append(r.inboxes, openInbox(t, c))
	}
	return r
}

func (r *room) criticIDs() []string {
	var ids []string
	for _, c := range r.critics {
		ids = append(ids, c.ID())
	}
	return ids
}

func (r *room) propose(t *testing.T, artifactID string) {
	t.Helper()
	_, err := r.rc.SubmitProposal(context.Background(), &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: artifactID, ProducerId: r.producer.ID(),
		Artifact: []byte("func Hello() string { return \"hi\" }"), ArtifactContentType: "text/x-go",
		RequestedCritics: r.criticIDs(), NegotiationRoomId: r.roomID,
	}})
	require.NoError(t, err)
	// Each critic receives the proposal through the router (§17.5).
	// (Critics also hear final decisions; those do not parse as proposals and are passed over.)
	for _, in := range r.inboxes {
		in.next(t, true, func(d *sdk.Delivery) bool {
			var p negotiationroompb.NegotiationProposal
			return d.Envelope.GetMessageType() == commonpb.MessageType_NEGOTIATION &&
				protojson.Unmarshal(d.Envelope.GetPayload(), &p) == nil && p.GetArtifactId() == artifactID
		})
	}
}

func (r *room) vote(t *testing.T, i int, artifactID string, score, confidence float64, passed bool, recs ...string) error {
	t.Helper()
	_, err := r.rc.SubmitVote(context.Background(), &negotiationroompb.SubmitVoteRequest{Vote: &negotiationroompb.NegotiationVote{
		ArtifactId: artifactID, CriticId: r.critics[i].ID(), Score: score, Confidence: confidence, Passed: passed,
		Strengths: []string{"clear"}, Weaknesses: []string{"none"}, Recommendations: recs, NegotiationRoomId: r.roomID,
	}})
	return err
}

func (r *room) wait(t *testing.T, artifactID string) *negotiationroompb.NegotiationDecision {
	t.Helper()
	resp, err := r.rc.WaitForDecision(context.Background(), &negotiationroompb.WaitForDecisionRequest{ArtifactId: artifactID, NegotiationRoomId: r.roomID, TimeoutSeconds: 60})
	require.NoError(t, err)
	return resp.GetDecision()
}

// TestRoomApprovedByThreeCritics: a producer and three critic agents reach APPROVED; the
// decision carries the votes, the aggregate, the policy version and a reason, and the
// producer is told.
func TestRoomApprovedByThreeCritics(t *testing.T) {
	sys := start(t, newConfig(t, "postgres"))
	r := newRoom(t, sys)
	r.propose(t, "code-123")
	require.NoError(t, r.vote(t, 0, "code-123", 8.5, 0.9, true))
	require.NoError(t, r.vote(t, 1, "code-123", 8.0, 0.8, true))
	require.NoError(t, r.vote(t, 2, "code-123", 9.0, 0.85, true))
	d := r.wait(t, "code-123")
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	assert.Len(t, d.GetVotes(), 3)
	assert.Equal(t, int32(3), d.GetAggregatedScore().GetVoteCount())
	assert.InDelta(t, 8.5, d.GetAggregatedScore().GetMean(), 1e-9)
	assert.NotEmpty(t, d.GetPolicyVersion())
	assert.NotEmpty(t, d.GetReason())
	// The producer hears the decision through the router.
	got := r.prodIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageType() == commonpb.MessageType_NEGOTIATION })
	var heard negotiationroompb.NegotiationDecision
	require.NoError(t, protojson.Unmarshal(got.Envelope.GetPayload(), &heard))
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, heard.GetOutcome())

	recordHistory(t, sys.app.Temporal(), workflows.RoomWorkflowID(r.roomID, "code-123"), "room_approved")
	votes, err := r.rc.GetVotes(context.Background(), &negotiationroompb.GetVotesRequest{ArtifactId: "code-123", NegotiationRoomId: r.roomID})
	require.NoError(t, err)
	assert.Equal(t, int32(3), votes.GetVoteCount())
	// An approved artifact_id is not reused.
	_, err = r.rc.SubmitProposal(context.Background(), &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: "code-123", ProducerId: r.producer.ID(), Artifact: []byte("x"),
		ArtifactContentType: "text/x-go", RequestedCritics: r.criticIDs(), NegotiationRoomId: r.roomID}})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
}

// TestRoomInvalidVotesAreRefused: every invalid vote gets a clear refusal and changes nothing.
func TestRoomInvalidVotesAreRefused(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	r := newRoom(t, sys)
	outsider := dialAgent(t, sys, "outsider")
	r.propose(t, "plan-1")
	ctx := context.Background()
	vote := func(critic string, score, conf float64) error {
		_, err := r.rc.SubmitVote(ctx, &negotiationroompb.SubmitVoteRequest{Vote: &negotiationroompb.NegotiationVote{
			ArtifactId: "plan-1", CriticId: critic, Score: score, Confidence: conf, Passed: true, NegotiationRoomId: r.roomID}})
		return err
	}
	err := vote(outsider.ID(), 8, 0.9)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "was not requested")
	err = vote(r.critics[0].ID(), 11, 0.9)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "score")
	err = vote(r.critics[0].ID(), 8, 1.5)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "confidence")
	require.NoError(t, vote(r.critics[0].ID(), 8, 0.9))
	err = vote(r.critics[0].ID(), 9, 0.9)
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	_, err = r.rc.SubmitVote(ctx, &negotiationroompb.SubmitVoteRequest{Vote: &negotiationroompb.NegotiationVote{
		ArtifactId: "nope", CriticId: r.critics[0].ID(), Score: 5, Confidence: 0.5, NegotiationRoomId: r.roomID}})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	votes, err := r.rc.GetVotes(ctx, &negotiationroompb.GetVotesRequest{ArtifactId: "plan-1", NegotiationRoomId: r.roomID})
	require.NoError(t, err)
	assert.Equal(t, int32(1), votes.GetVoteCount(), "refused votes changed nothing")
	require.NoError(t, vote(r.critics[1].ID(), 8, 0.9))
	require.NoError(t, vote(r.critics[2].ID(), 8, 0.9))
	r.wait(t, "plan-1")
	err = vote(r.critics[2].ID(), 8, 0.9)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a decided artifact takes no votes: %v", err)

	// Bad proposals are refused too.
	_, err = r.rc.SubmitProposal(ctx, &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: "p2", ProducerId: r.producer.ID(), ArtifactContentType: "text/x-go",
		RequestedCritics: []string{"nobody-" + uniq(t, "x")}, NegotiationRoomId: r.roomID}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "not a registered agent")
	_, err = r.rc.SubmitProposal(ctx, &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
		ArtifactType: 0, ArtifactId: "p3", ProducerId: r.producer.ID(), ArtifactContentType: "text/x-go", RequestedCritics: r.criticIDs(), NegotiationRoomId: r.roomID}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// TestRoomSplitVoteEscalatesAndOperatorApproves: a split vote escalates to HITL; an operator
// approves with a plain `temporal workflow signal`; the outcome is APPROVED with the human's
// rationale. Then a revision loop: REVISION_REQUESTED, the producer submits version 2.
func TestRoomSplitVoteEscalatesAndOperatorApproves(t *testing.T) {
	sys := start(t, hitlConfig(t, "memory"))
	r := newRoom(t, sys)
	ctx := context.Background()
	r.propose(t, "deploy-7")
	require.NoError(t, r.vote(t, 0, "deploy-7", 9.5, 0.9, true))
	require.NoError(t, r.vote(t, 1, "deploy-7", 1.0, 0.9, false))
	require.NoError(t, r.vote(t, 2, "deploy-7", 9.0, 0.9, true))

	var st workflows.RoomState
	require.Eventually(t, func() bool {
		v, err := sys.app.Temporal().QueryWorkflow(ctx, workflows.RoomWorkflowID(r.roomID, "deploy-7"), "", workflows.RoomStateQuery)
		return err == nil && v.Get(&st) == nil && st.HITLInvocationID != ""
	}, 20*time.Second, 50*time.Millisecond)
	dec, err := r.rc.GetDecision(ctx, &negotiationroompb.GetDecisionRequest{ArtifactId: "deploy-7", NegotiationRoomId: r.roomID})
	require.NoError(t, err)
	assert.Equal(t, negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL, dec.GetDecision().GetOutcome())
	assert.Contains(t, dec.GetDecision().GetReason(), "std")

	payload, err := json.Marshal(signedBy(t, hitl.Decision{InvocationID: st.HITLInvocationID, Decision: hitl.Approve,
		Rationale: "security critic misread the config", Operator: "alice"}, aliceKey))
	require.NoError(t, err)
	out, err := exec.Command(temporalCLI(), "workflow", "signal", "--address", temporalAddr, "--namespace", "default",
		"--workflow-id", hitl.WorkflowID(st.HITLInvocationID), "--name", hitl.DecisionSignal, "--input", string(payload)).CombinedOutput()
	require.NoError(t, err, string(out))
	d := r.wait(t, "deploy-7")
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	assert.Contains(t, d.GetReason(), "security critic misread the config")
	assert.Contains(t, d.GetReason(), "alice")
	recordHistory(t, sys.app.Temporal(), workflows.RoomWorkflowID(r.roomID, "deploy-7"), "room_escalated_approved")

	// Revision loop: low scores → REVISION_REQUESTED, then version 2 is reviewed.
	r.propose(t, "req-9")
	for i := range 3 {
		require.NoError(t, r.vote(t, i, "req-9", 4, 0.9, false))
	}
	assert.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, r.wait(t, "req-9").GetOutcome())
	r.propose(t, "req-9")
	for i := range 3 {
		require.NoError(t, r.vote(t, i, "req-9", 8.5, 0.9, true))
	}
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, r.wait(t, "req-9").GetOutcome())
	arts, err := activitypb.NewActivityServiceClient(dialRaw(t, sys)).ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: workflows.RoomWorkflowID(r.roomID, "req-9")})
	require.NoError(t, err)
	var history []string
	for _, a := range arts.GetItems() {
		history = append(history, a.GetKind()+"/"+a.GetVersion())
	}
	assert.Equal(t, []string{"proposal/1", "decision/1", "proposal/2", "decision/2"}, history, "the history of versions and decisions stays readable")
}

// TestRoomTimeoutWithMissingVoteEscalates: one critic never votes; at the policy timeout the
// coordinator escalates; with nobody deciding, the HITL fallback's outcome is final.
func TestRoomTimeoutWithMissingVoteEscalates(t *testing.T) {
	cfg := hitlConfig(t, "memory")
	cfg.RoomTimeout = 2 * time.Second
	cfg.HITLTimeout = 2 * time.Second
	sys := start(t, cfg)
	r := newRoom(t, sys)
	r.propose(t, "code-9")
	require.NoError(t, r.vote(t, 0, "code-9", 8, 0.9, true))
	require.NoError(t, r.vote(t, 1, "code-9", 8, 0.9, true))
	d := r.wait(t, "code-9")
	assert.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, d.GetOutcome(), "the escalation's deny-by-default fallback")
	assert.Contains(t, d.GetReason(), "timeout")
	assert.Contains(t, d.GetReason(), "fallback")
	assert.Len(t, d.GetVotes(), 2)
}
