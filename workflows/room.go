package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// Names of the negotiation room coordinator's messages (§17.5).
const (
	// RoomVoteUpdate carries a *negotiationroompb.NegotiationVote; its validator refuses
	// votes that break the rules, so SubmitVote answers synchronously with the reason.
	RoomVoteUpdate = "room-vote"
	// RoomStateQuery returns a RoomState.
	RoomStateQuery = "room-state"
	// DefaultRoomTimeout is how long the coordinator waits for every requested critic.
	DefaultRoomTimeout = 10 * time.Minute
	// DefaultRoomID is the room of proposals that name none.
	DefaultRoomID = "default"
)

// RoomWorkflowID is the coordinator of one artifact: "room/<room_id>/<artifact_id>".
func RoomWorkflowID(roomID, artifactID string) string { return "room/" + roomID + "/" + artifactID }

// RoomInput starts a coordinator for one version of an artifact.
type RoomInput struct {
	// Proposal is the producer's proposal.
	Proposal *negotiationroompb.NegotiationProposal
	// Version is the artifact's version: 1, then +1 for each revision.
	Version int
	// Policy decides; zero fields take voting.DefaultPolicy's values.
	Policy voting.Policy
	// Timeout bounds the wait for votes; zero means DefaultRoomTimeout.
	Timeout time.Duration
	// HITLTimeout bounds the human's decision after an escalation; zero means the HITL default.
	HITLTimeout time.Duration
	// HITLFallback is the proposal's own hitl_unavailable_policy (§15.4), chosen with the
	// sw4rm-hitl-unavailable-policy metadata of SubmitProposal; nil means the deployment's.
	HITLFallback *hitl.Fallback `json:",omitempty"`
}

// RoomState is the answer to RoomStateQuery.
type RoomState struct {
	// Proposal is the proposal under review.
	Proposal *negotiationroompb.NegotiationProposal
	// Version is its version.
	Version int
	// Votes are the votes so far, in arrival order.
	Votes []*negotiationroompb.NegotiationVote
	// Decision is the current decision: nil while votes are awaited, ESCALATED_TO_HITL while a
	// human decides, then final.
	Decision *negotiationroompb.NegotiationDecision
	// Final is true once the decision can no longer change.
	Final bool
	// HITLInvocationID names the escalation's HITL invocation, if any.
	HITLInvocationID string
}

// RoomCoordinator is the coordinator of the producer–critic pattern (§17.5, 000 §3.11.1): it
// sends the proposal to each requested critic through the router, collects their votes
// (refusing invalid ones synchronously), and once every critic has voted or the timeout
// passes applies the decision policy — APPROVED, REVISION_REQUESTED, or ESCALATED_TO_HITL
// through RequestHITL, whose human decision becomes the outcome. Every decision carries the
// votes, the aggregate, the policy version and a readable reason, is stored as an artifact
// version and is sent to the producer.
func RoomCoordinator(ctx workflow.Context, in RoomInput) (*negotiationroompb.NegotiationDecision, error) {
	w := &roomCoordinator{in: in}
	d, err := w.run(ctx)
	// A vote being applied finishes, and its critic gets the answer, before the room closes.
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	return d, err
}

type roomCoordinator struct {
	in       RoomInput
	votes    []*negotiationroompb.NegotiationVote
	decision *negotiationroompb.NegotiationDecision
	final    bool
	hitlID   string
}

func (w *roomCoordinator) run(ctx workflow.Context) (*negotiationroompb.NegotiationDecision, error) {
	p := w.in.Proposal
	if err := voting.ValidateProposal(p); err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid proposal: "+err.Error(), "validation_error", nil)
	}
	policy := w.policy()
	if err := policy.Validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid policy: "+err.Error(), "validation_error", nil)
	}
	if err := workflow.SetQueryHandler(ctx, RoomStateQuery, func() (RoomState, error) {
		return RoomState{Proposal: p, Version: w.in.Version, Votes: w.votes, Decision: w.decision, Final: w.final, HITLInvocationID: w.hitlID}, nil
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, RoomVoteUpdate,
		func(ctx workflow.Context, v *negotiationroompb.NegotiationVote) (*negotiationroompb.NegotiationVote, error) {
			v.NegotiationRoomId = p.GetNegotiationRoomId()
			if v.GetVotedAt() == nil {
				v.VotedAt = timestamppb.New(workflow.Now(ctx))
			}
			w.votes = append(w.votes, v)
			return v, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, v *negotiationroompb.NegotiationVote) error {
			var err error
			switch {
			case w.decision != nil:
				err = fmt.Errorf("%w: artifact %q was already decided (%s)", voting.ErrDecided, p.GetArtifactId(), w.decision.GetOutcome())
			case v.GetArtifactId() != p.GetArtifactId():
				err = fmt.Errorf("vote is for artifact %q, this room reviews %q", v.GetArtifactId(), p.GetArtifactId())
			default:
				err = voting.ValidateVote(v, p.GetRequestedCritics(), w.votes)
			}
			if err != nil {
				// The error type travels to the frontend, which maps it to a gRPC code.
				return temporal.NewApplicationError(err.Error(), voting.ErrorType(err))
			}
			return nil
		}},
	); err != nil {
		return nil, err
	}

	// The room's side effects are short store writes and router admissions in the worker's
	// own process, so they run as local activities: no task-queue round trip per step, which
	// keeps a decision close to bare Temporal's start + updates (see docs/benchmarks.md).
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	var acts *activities.Activities
	if err := workflow.ExecuteLocalActivity(actx, acts.PublishProposal, activities.ProposalInput{Proposal: p, Version: w.in.Version}).Get(ctx, nil); err != nil {
		return nil, err
	}

	timeout := w.in.Timeout
	if timeout <= 0 {
		timeout = DefaultRoomTimeout
	}
	allVoted := func() bool { return len(w.votes) >= len(p.GetRequestedCritics()) }
	timedOut := false
	ok, err := workflow.AwaitWithTimeout(ctx, timeout, allVoted)
	if err != nil {
		return nil, err
	}
	timedOut = !ok

	verdict := voting.Decide(policy, p.GetRequestedCritics(), w.votes, timedOut)
	w.decision = &negotiationroompb.NegotiationDecision{
		ArtifactId: p.GetArtifactId(), Outcome: verdict.Outcome, Votes: w.votes, AggregatedScore: verdict.Aggregate,
		PolicyVersion: policy.Version, Reason: verdict.Reason, NegotiationRoomId: p.GetNegotiationRoomId(),
		DecidedAt: timestamppb.New(workflow.Now(ctx)),
	}
	if verdict.Outcome == negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL {
		if err := w.escalate(ctx, actx, verdict); err != nil {
			return nil, err
		}
	}
	w.final = true
	if err := workflow.ExecuteLocalActivity(actx, acts.PublishDecision, activities.DecisionInput{
		Decision: w.decision, ProducerID: p.GetProducerId(), Version: w.in.Version, Critics: p.GetRequestedCritics(),
	}).Get(ctx, nil); err != nil {
		return nil, err
	}
	return w.decision, nil
}

// escalate asks a human (§15) and turns the answer into the outcome: approve → APPROVED;
// deny or modify → REVISION_REQUESTED (a modify's patch is quoted in the reason); defer, or no
// answer, keeps the fallback's verdict.
func (w *roomCoordinator) escalate(ctx, actx workflow.Context, verdict voting.Verdict) error {
	p := w.in.Proposal
	var acts *activities.Activities
	// Publish the provisional decision first: GetDecision shows the escalation while the
	// human decides.
	if err := workflow.ExecuteLocalActivity(actx, acts.PublishDecision, activities.DecisionInput{
		Decision: w.decision, ProducerID: p.GetProducerId(), Version: w.in.Version, Provisional: true,
	}).Get(ctx, nil); err != nil {
		return err
	}
	facts := []string{fmt.Sprintf("%s %q v%d by %s", p.GetArtifactType(), p.GetArtifactId(), w.in.Version, p.GetProducerId()), verdict.Reason}
	for _, v := range w.votes {
		facts = append(facts, fmt.Sprintf("%s: score %.1f, confidence %.2f, passed %t; weaknesses %s; recommendations %s",
			v.GetCriticId(), v.GetScore(), v.GetConfidence(), v.GetPassed(), strings.Join(v.GetWeaknesses(), "; "), strings.Join(v.GetRecommendations(), "; ")))
	}
	inv := hitl.Invocation{
		ReasonType:    "DEBATE_DEADLOCK",
		CorrelationID: workflow.GetInfo(ctx).WorkflowExecution.ID,
		Subject:       hitl.Subject{NegotiationID: workflow.GetInfo(ctx).WorkflowExecution.ID, AgentID: p.GetProducerId()},
		Context: hitl.Context{Facts: facts, RiskNotes: verdict.Escalations, Inference: map[string]string{
			"weighted_mean": fmt.Sprintf("%.3f", verdict.Aggregate.GetWeightedMean()), "std_dev": fmt.Sprintf("%.3f", verdict.Aggregate.GetStdDev()),
		}},
		ProposedActions: []string{"approve", "deny", "modify"},
		SuggestedAction: "deny",
		Timeout:         w.in.HITLTimeout,
	}
	if w.in.HITLFallback != nil {
		inv.Fallback = *w.in.HITLFallback
	}
	// AUTO_DECIDE_THRESHOLD compares the aggregate with its threshold on the 0–1 scale of every
	// fallback threshold: the weighted mean of the 0–10 votes, divided by 10.
	inv.Fallback.Score = verdict.Aggregate.GetWeightedMean() / voting.MaxVoteScore
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&inv.InvocationID); err != nil {
		return err
	}
	w.hitlID = inv.InvocationID
	out, err := RequestHITL(ctx, inv)
	if err != nil {
		return err
	}
	who := out.DecidedBy
	if out.Fallback {
		who = "fallback " + out.FallbackPolicy
	}
	switch out.Decision {
	case hitl.Approve:
		w.decision.Outcome = negotiationroompb.DecisionOutcome_APPROVED
	case hitl.Deny:
		w.decision.Outcome = negotiationroompb.DecisionOutcome_REVISION_REQUESTED
	case hitl.Modify:
		w.decision.Outcome = negotiationroompb.DecisionOutcome_REVISION_REQUESTED
		w.decision.Reason += fmt.Sprintf("; requested modification: %s", string(out.Patch))
	}
	w.decision.Reason = fmt.Sprintf("%s; escalated to HITL (%s): %s by %s — %s", w.decision.Reason, inv.InvocationID, out.Decision, who, out.Rationale)
	w.decision.DecidedAt = timestamppb.New(workflow.Now(ctx))
	return nil
}

// policy fills zero fields of the input policy with the defaults.
func (w *roomCoordinator) policy() voting.Policy {
	p, def := w.in.Policy, voting.DefaultPolicy()
	if p.MinScore == 0 {
		p.MinScore = def.MinScore
	}
	if p.MinConfidence == 0 {
		p.MinConfidence = def.MinConfidence
	}
	if p.MinPassRatio == 0 {
		p.MinPassRatio = def.MinPassRatio
	}
	if p.MaxStdDev == 0 {
		p.MaxStdDev = def.MaxStdDev
	}
	if p.EscalateBelowConfidence == 0 {
		p.EscalateBelowConfidence = def.EscalateBelowConfidence
	}
	if p.EscalateAboveStdDev == 0 {
		p.EscalateAboveStdDev = def.EscalateAboveStdDev
	}
	if p.Strategy == "" {
		p.Strategy = def.Strategy
	}
	if p.Version == "" {
		p.Version = def.Version
	}
	return p
}

// KindRoom is the SW4RMKind search-attribute value of negotiation room coordinators.
const KindRoom = "room"

// RoomStartOptions are the start options of the coordinator room/<room_id>/<artifact_id> on
// taskQueue. A decided artifact's ID may run again (its revision after
// REVISION_REQUESTED); a running one may not.
func RoomStartOptions(roomID, artifactID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: RoomWorkflowID(roomID, artifactID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		TypedSearchAttributes:    temporal.NewSearchAttributes(KindKey.ValueSet(KindRoom), RoomIDKey.ValueSet(roomID)),
		StaticSummary:            summary("negotiation room %s: votes on artifact %s (§17.5)", roomID, artifactID),
	}
}
