package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

func roomEnv(t *testing.T, policy hitl.Policy) (*testsuite.TestWorkflowEnvironment, store.Store) {
	t.Helper()
	env, st := hitlEnv(t, policy)
	for _, id := range []string{"producer", "c1", "c2", "c3"} {
		require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id}, State: commonpb.AgentState_RUNNABLE}))
	}
	return env, st
}

func proposal() *negotiationroompb.NegotiationProposal {
	return &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: "code-123", ProducerId: "producer",
		Artifact: []byte("def hello(): pass"), ArtifactContentType: "text/x-python",
		RequestedCritics: []string{"c1", "c2", "c3"}, NegotiationRoomId: "room-1",
	}
}

type voteResult struct {
	rejected error
	accepted bool
}

// vote sends a vote update at a moment of workflow time and records the validator's answer.
func vote(env *testsuite.TestWorkflowEnvironment, after time.Duration, v *negotiationroompb.NegotiationVote, res *voteResult) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.RoomVoteUpdate, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { res.rejected = err },
			OnAccept:   func() { res.accepted = true },
			OnComplete: func(any, error) {},
		}, v)
	}, after)
}

func v(critic string, score, confidence float64, passed bool, recs ...string) *negotiationroompb.NegotiationVote {
	return &negotiationroompb.NegotiationVote{ArtifactId: "code-123", CriticId: critic, Score: score, Confidence: confidence, Passed: passed, Recommendations: recs}
}

func decisionOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) *negotiationroompb.NegotiationDecision {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var d *negotiationroompb.NegotiationDecision
	require.NoError(t, env.GetWorkflowResult(&d))
	return d
}

func TestRoomApprovesWhenThresholdsHold(t *testing.T) {
	env, st := roomEnv(t, hitl.Policy{})
	var r1, r2, r3 voteResult
	vote(env, time.Second, v("c1", 8.5, 0.9, true), &r1)
	vote(env, 2*time.Second, v("c2", 8.0, 0.8, true), &r2)
	vote(env, 3*time.Second, v("c3", 9.0, 0.85, true), &r3)
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1})
	d := decisionOf(t, env)
	assert.True(t, r1.accepted && r2.accepted && r3.accepted)
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	assert.Len(t, d.GetVotes(), 3)
	assert.Equal(t, "room-policy/v1", d.GetPolicyVersion())
	assert.NotEmpty(t, d.GetReason())
	arts, err := st.Artifacts().ListArtifacts(context.Background(), "room/room-1/code-123", "")
	require.NoError(t, err)
	require.Len(t, arts, 2)
	assert.Equal(t, []string{"proposal", "decision"}, []string{arts[0].Kind, arts[1].Kind})
}

func TestRoomRefusesInvalidVotes(t *testing.T) {
	env, _ := roomEnv(t, hitl.Policy{})
	var outsider, high, dup, first voteResult
	vote(env, time.Second, v("mallory", 8, 0.9, true), &outsider)
	vote(env, 2*time.Second, v("c1", 10.5, 0.9, true), &high)
	vote(env, 3*time.Second, v("c1", 8, 0.9, true), &first)
	vote(env, 4*time.Second, v("c1", 7, 0.9, true), &dup)
	vote(env, 5*time.Second, v("c2", 8, 0.9, true), &voteResult{})
	vote(env, 6*time.Second, v("c3", 8, 0.9, true), &voteResult{})
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1})
	d := decisionOf(t, env)
	require.Error(t, outsider.rejected)
	assert.Contains(t, outsider.rejected.Error(), "not requested")
	require.Error(t, high.rejected)
	assert.Contains(t, high.rejected.Error(), "score")
	assert.True(t, first.accepted)
	require.Error(t, dup.rejected)
	assert.Len(t, d.GetVotes(), 3, "refused votes are not counted")
}

func TestRoomLowScoresRequestRevision(t *testing.T) {
	env, _ := roomEnv(t, hitl.Policy{})
	for i, c := range []string{"c1", "c2", "c3"} {
		vote(env, time.Duration(i+1)*time.Second, v(c, 5, 0.9, false), &voteResult{})
	}
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1})
	assert.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, decisionOf(t, env).GetOutcome())
}

func TestRoomSplitVoteEscalatesAndHumanDecides(t *testing.T) {
	env, _ := roomEnv(t, policy)
	vote(env, time.Second, v("c1", 9.5, 0.9, true), &voteResult{})
	vote(env, 2*time.Second, v("c2", 1.0, 0.9, false), &voteResult{})
	vote(env, 3*time.Second, v("c3", 9.0, 0.9, true), &voteResult{})
	env.RegisterDelayedCallback(func() {
		val, err := env.QueryWorkflow(workflows.RoomStateQuery)
		require.NoError(t, err)
		var st workflows.RoomState
		require.NoError(t, val.Get(&st))
		require.NotEmpty(t, st.HITLInvocationID)
		assert.Equal(t, negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL, st.Decision.GetOutcome())
		require.NoError(t, env.SignalWorkflowByID(hitl.WorkflowID(st.HITLInvocationID), hitl.DecisionSignal, attestAt(env, hitl.Decision{
			InvocationID: st.HITLInvocationID, Decision: hitl.Approve, Rationale: "the outlier misread it", Operator: "alice"}, decisionKey)))
	}, time.Minute)
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1})
	d := decisionOf(t, env)
	assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	assert.Contains(t, d.GetReason(), "the outlier misread it")
}

func TestRoomCriticAskingForEscalation(t *testing.T) {
	env, _ := roomEnv(t, hitl.Policy{}) // no operators: the HITL fallback denies at once
	vote(env, time.Second, v("c1", 8.5, 0.9, true, "Escalate to HITL: licence question"), &voteResult{})
	vote(env, 2*time.Second, v("c2", 8.5, 0.9, true), &voteResult{})
	vote(env, 3*time.Second, v("c3", 8.5, 0.9, true), &voteResult{})
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1})
	d := decisionOf(t, env)
	assert.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, d.GetOutcome())
	assert.Contains(t, d.GetReason(), "escalat")
	assert.Contains(t, d.GetReason(), "fallback")
}

func TestRoomTimeoutWithMissingVoteEscalates(t *testing.T) {
	env, _ := roomEnv(t, hitl.Policy{})
	vote(env, time.Second, v("c1", 9, 0.9, true), &voteResult{})
	vote(env, 2*time.Second, v("c2", 9, 0.9, true), &voteResult{})
	env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1, Timeout: 5 * time.Minute})
	d := decisionOf(t, env)
	assert.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, d.GetOutcome())
	assert.Contains(t, d.GetReason(), "timeout")
	assert.Len(t, d.GetVotes(), 2)
}
