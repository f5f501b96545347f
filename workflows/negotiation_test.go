package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// negHarness runs Negotiation with its activities mocked: published events and artifacts are
// remembered, EvaluateDebate answers engine, turns answer turn.
type negHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu        sync.Mutex
	events    []activities.NegotiationEvent
	artifacts []activities.NegotiationArtifact
	summaries int
	// summarizeErr, when set, is what SummarizeTranscript fails with (the engine unreachable).
	summarizeErr error
	engine       float64
	turn         func(in workflows.TaskInput, p debate.TurnParams) string
	hitl         func(inv hitl.Invocation) hitl.Outcome
	invs         []hitl.Invocation
	// pubs are the publications in the order they ran; slowPublisher delays the regular ones.
	pubs          []activities.NegotiationPublishInput
	slowPublisher time.Duration
}

func newNegHarness(t *testing.T) *negHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &negHarness{t: t, env: suite.NewTestWorkflowEnvironment(), engine: 0.9}
	h.env.SetStartTime(time.Date(2025, 1, 1, 8, 0, 0, 0, time.UTC))
	var acts *activities.Activities
	publish := func(_ context.Context, in activities.NegotiationPublishInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		// The first Resent events are another publication's, which records them itself.
		h.events = append(h.events, in.Events[in.Resent:]...)
		h.artifacts = append(h.artifacts, in.Artifacts...)
		h.pubs = append(h.pubs, in)
		return nil
	}
	// With slowPublisher set, the publisher's regular activities take that long (test time);
	// local activities never wait.
	slow := mock.MatchedBy(func(ctx context.Context) bool { return h.slowPublisher > 0 && !activity.GetInfo(ctx).IsLocalActivity })
	h.env.OnActivity(acts.PublishNegotiation, slow, mock.Anything).AfterFn(func() time.Duration { return h.slowPublisher }).Return(publish)
	h.env.OnActivity(acts.PublishNegotiation, mock.Anything, mock.Anything).Return(publish)
	h.env.OnActivity(acts.EvaluateNegotiationDrafts, mock.Anything, mock.Anything).Return(func(_ context.Context, _ activities.DebateEvaluationInput) (activities.DebateEvaluation, error) {
		return activities.DebateEvaluation{Confidence: h.engine, Notes: "mock"}, nil
	})
	h.env.OnActivity(acts.SummarizeTranscript, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SummarizeInput) (string, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.summaries++
		if h.summarizeErr != nil {
			return "", h.summarizeErr
		}
		return fmt.Sprintf("summary of %d turns", len(in.Turns)), nil
	})
	h.env.RegisterWorkflow(workflows.TaskWorkflow)
	h.env.OnWorkflow(workflows.TaskWorkflow, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in workflows.TaskInput) (workflows.TaskStatus, error) {
			var p debate.TurnParams
			require.NoError(t, json.Unmarshal(in.Params, &p))
			return workflows.TaskStatus{TaskID: in.TaskID, AgentID: in.AgentID, State: workflows.TaskCompleted, Result: h.turn(in, p)}, nil
		})
	h.env.RegisterWorkflow(workflows.HitlWait)
	h.env.OnWorkflow(workflows.HitlWait, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in workflows.HitlWaitInput) (hitl.Outcome, error) {
			h.mu.Lock()
			h.invs = append(h.invs, in.Invocation)
			h.mu.Unlock()
			return h.hitl(in.Invocation), nil
		})
	return h
}

func (h *negHarness) kinds() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ks []string
	for _, e := range h.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

// debateOfThree runs a debate of a, b and c with opts to its end and returns the final state
// and the decided debate.Result.
func (h *negHarness) debateOfThree(opts debate.Options) (workflows.NegotiationState, debate.Result) {
	h.t.Helper()
	in := negInput(basePolicy())
	in.Participants = []string{"a", "b", "c"}
	in.Mode = workflows.NegotiationModeDebate
	in.Debate = opts
	h.env.ExecuteWorkflow(workflows.Negotiation, in)
	st := h.result()
	var res debate.Result
	require.NoError(h.t, json.Unmarshal(st.Result, &res))
	return st, res
}

// input is a contract negotiation between a and b under p, with ten minutes in all.
func negInput(p *policypb.NegotiationPolicy) workflows.NegotiationInput {
	return workflows.NegotiationInput{NegotiationID: "n1", Topic: "t", Participants: []string{"a", "b"}, Intensity: commonpb.DebateIntensity_MEDIUM,
		Opener: "agent:a", OpenerAgent: "a", Effective: &policypb.EffectivePolicy{Policy: p}, DebateTimeout: 10 * time.Minute}
}

func basePolicy() *policypb.NegotiationPolicy {
	return &policypb.NegotiationPolicy{MaxRounds: 6, ScoreThreshold: 0.7, DiffTolerance: 0.5, RoundTimeoutMs: 60_000, OscillationLimit: 1,
		Hitl: &policypb.NegotiationPolicy_Hitl{Mode: negotiation.HitlNone}, Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 0.5}}
}

// update sends an update at the given offset and records its error.
func (h *negHarness) update(at time.Duration, name string, arg any, errs *[]error) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *errs = append(*errs, err) },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		}, arg)
	}, at)
}

func (h *negHarness) result() workflows.NegotiationState {
	h.t.Helper()
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	var st workflows.NegotiationState
	require.NoError(h.t, h.env.GetWorkflowResult(&st))
	return st
}

// TestNegotiationRoundTimeoutTieBreak: a proposal nobody evaluates stops on the durable round
// timer, and the tie-break decides it by policy because its score reaches the threshold.
func TestNegotiationRoundTimeoutTieBreak(t *testing.T) {
	h := newNegHarness(t)
	var errs []error
	h.update(time.Second, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: "a", ContentType: "application/json", Payload: []byte(`{"x":1}`)}, &errs)
	h.env.ExecuteWorkflow(workflows.Negotiation, negInput(basePolicy()))
	st := h.result()
	assert.Empty(t, errs)
	assert.Equal(t, workflows.NegotiationDecided, st.Status)
	assert.Equal(t, "policy", st.Decision.GetDecidedBy())
	assert.Equal(t, negotiation.StopTimeout, st.Decision.GetStopReason())
	assert.Equal(t, []byte(`{"x":1}`), st.Result)
	assert.Equal(t, []string{"open", "policy", "propose", "decide"}, h.kinds())
}

// TestNegotiationRefusalsAndOscillation: out-of-turn, outsider and early drafts are refused
// by the validator and leave no version; then oscillation between two versions stops the
// negotiation, and with every score below the threshold a human decides (DEBATE_DEADLOCK),
// here by modifying.
func TestNegotiationRefusalsAndOscillation(t *testing.T) {
	h := newNegHarness(t)
	h.engine = 0
	h.hitl = func(inv hitl.Invocation) hitl.Outcome {
		return hitl.Outcome{InvocationID: inv.InvocationID, Decision: hitl.Modify, Patch: []byte(`{"x":2}`), DecidedBy: "alice", Rationale: "split the difference"}
	}
	p := basePolicy()
	p.Scoring.LlmWeight = 1
	var errs []error
	draft := func(at time.Duration, from string, counter bool, x int) {
		h.update(at, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: from, Counter: counter, ContentType: "application/json", Payload: []byte(fmt.Sprintf(`{"x":%d}`, x))}, &errs)
	}
	draft(time.Second, "b", false, 1)   // out of turn
	draft(2*time.Second, "c", false, 1) // not a participant
	draft(3*time.Second, "a", true, 1)  // a counter before any proposal
	draft(4*time.Second, "a", false, 1) // v1
	h.update(5*time.Second, workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{From: "b", Confidence: 0.2}, &errs)
	draft(6*time.Second, "b", true, 3) // v2
	h.update(7*time.Second, workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{From: "a", Confidence: 0.2}, &errs)
	draft(8*time.Second, "a", true, 1) // v3 repeats v1
	draft(9*time.Second, "b", true, 3) // v4 repeats v2: a second repeat, over the limit
	h.env.ExecuteWorkflow(workflows.Negotiation, negInput(p))
	st := h.result()
	require.Len(t, errs, 3)
	assert.Contains(t, errs[0].Error(), "turn")
	assert.Contains(t, errs[1].Error(), "not a participant")
	assert.Contains(t, errs[2].Error(), "Propose")
	require.Len(t, st.Versions, 4, "refusals consumed no round")
	assert.Equal(t, negotiation.StopOscillation, st.Decision.GetStopReason())
	assert.Equal(t, "hitl", st.Decision.GetDecidedBy())
	assert.Equal(t, []byte(`{"x":2}`), st.Result, "the human's modification is decided")
	require.Len(t, h.invs, 1)
	assert.Equal(t, "DEBATE_DEADLOCK", h.invs[0].ReasonType)
	assert.Equal(t, "n1", h.invs[0].CorrelationID)
}

// TestNegotiationFinalAcceptGate: under PauseOnFinalAccept an accepted version waits for a
// human, who approves; the version is decided by consensus.
func TestNegotiationFinalAcceptGate(t *testing.T) {
	h := newNegHarness(t)
	h.hitl = func(inv hitl.Invocation) hitl.Outcome {
		return hitl.Outcome{InvocationID: inv.InvocationID, Decision: hitl.Approve, DecidedBy: "alice", Rationale: "ok"}
	}
	p := basePolicy()
	p.Hitl.Mode = negotiation.HitlPauseOnFinalAccept
	var errs []error
	h.update(time.Second, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: "a", ContentType: "text/plain", Payload: []byte("v1")}, &errs)
	h.update(2*time.Second, workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{From: "b", Confidence: 0.95}, &errs)
	h.env.ExecuteWorkflow(workflows.Negotiation, negInput(p))
	st := h.result()
	assert.Empty(t, errs)
	assert.Equal(t, "consensus", st.Decision.GetDecidedBy())
	assert.Equal(t, negotiation.StopThreshold, st.Decision.GetStopReason())
	require.Len(t, h.invs, 1)
	assert.Equal(t, "MANUAL_OVERRIDE", h.invs[0].ReasonType)
}

// TestNegotiationDebateSummarizes: a debate whose transcript outgrows the summary threshold
// sends later turns a summary plus the last round; every participant speaks once per round;
// the final round's verdicts are aggregated.
func TestNegotiationDebateSummarizes(t *testing.T) {
	h := newNegHarness(t)
	var mu sync.Mutex
	seen := map[int][]debate.TurnParams{}
	h.turn = func(in workflows.TaskInput, p debate.TurnParams) string {
		mu.Lock()
		seen[p.Round] = append(seen[p.Round], p)
		mu.Unlock()
		text := fmt.Sprintf("In round %d %s argues a new point number %d with plenty of words to fill the transcript quickly.", p.Round, in.AgentID, p.Round)
		if p.Final {
			text += "\nFINAL_VERDICT: approve score=8 confidence=0.9"
		}
		return text
	}
	_, res := h.debateOfThree(debate.Options{Rounds: 3, SummaryThreshold: 200})
	assert.Equal(t, 3, res.RoundsRun)
	assert.Equal(t, debate.StopRounds, res.StopReason)
	assert.Equal(t, "approve", res.Majority)
	assert.Len(t, res.Transcript, 9)
	for r := 1; r <= 3; r++ {
		assert.Len(t, seen[r], 3, "round %d: one turn each", r)
	}
	assert.Empty(t, seen[1][0].Transcript, "round 1 sees no transcript")
	assert.NotEmpty(t, seen[3][0].Summary, "round 3 carries a summary")
	for _, tr := range seen[3][0].Transcript {
		assert.Equal(t, 2, tr.Round, "with the summary, only the last round verbatim")
	}
	assert.True(t, seen[3][0].Final)
	assert.True(t, strings.Contains(seen[3][0].Instruction, debate.VerdictMarker))
	assert.Positive(t, h.summaries)
}

// TestNegotiationDebateShortenedWhenEngineUnreachable (§20): when the reasoning engine cannot
// summarize the transcript, the debate does not fail — the round that needed the summary gets
// the earlier rounds verbatim and is the last (asked for FINAL_VERDICT), and the result says
// why it stopped early.
func TestNegotiationDebateShortenedWhenEngineUnreachable(t *testing.T) {
	h := newNegHarness(t)
	h.summarizeErr = temporal.NewNonRetryableApplicationError("reasoning engine unreachable: connection refused", "unavailable", nil)
	var mu sync.Mutex
	seen := map[int][]debate.TurnParams{}
	h.turn = func(in workflows.TaskInput, p debate.TurnParams) string {
		mu.Lock()
		seen[p.Round] = append(seen[p.Round], p)
		mu.Unlock()
		text := fmt.Sprintf("Round %d from %s: %s", p.Round, in.AgentID, strings.Repeat("a new and distinct argument ", 4))
		if p.Final {
			text += "\nFINAL_VERDICT: approve score=8 confidence=0.9"
		}
		return text
	}
	st, res := h.debateOfThree(debate.Options{Rounds: 5, SummaryThreshold: 200})
	assert.Equal(t, debate.StopEngineUnreachable, res.StopReason)
	assert.Equal(t, 2, res.RoundsRun, "round 2 needed the summary and was made the last")
	assert.Equal(t, "approve", res.Majority, "the shortened round's verdicts decide")
	require.Len(t, seen[2], 3)
	assert.True(t, seen[2][0].Final)
	assert.Empty(t, seen[2][0].Summary)
	assert.Len(t, seen[2][0].Transcript, 3, "the earlier round verbatim")
	assert.Empty(t, seen[3], "no round after the shortened one")
	assert.Contains(t, st.Decision.GetRationale(), "reasoning engine was unreachable (§20)")
}

// TestNegotiationDebateTaskIDs: turn task ids are valid and distinct per round and agent.
func TestNegotiationDebateTaskIDs(t *testing.T) {
	assert.Equal(t, "debate-n1-r2-a", workflows.DebateTaskID("n1", 2, "a"))
	long := strings.Repeat("x", 300)
	id1, id2 := workflows.DebateTaskID(long, 1, "a"), workflows.DebateTaskID(long, 1, "b")
	assert.LessOrEqual(t, len(id1), 200)
	assert.NotEqual(t, id1, id2)
}

// TestNegotiationDebateTurnScopes: every turn task carries DebateTurnScope, a resource of its
// own, so that the rule engine finds two turns of a round disjoint and admission runs them in
// parallel (§9.3) instead of escalating to a human; agent ids with ':' and '@' parse too.
func TestNegotiationDebateTurnScopes(t *testing.T) {
	h := newNegHarness(t)
	var mu sync.Mutex
	scopes := map[string]string{}
	h.turn = func(in workflows.TaskInput, p debate.TurnParams) string {
		mu.Lock()
		scopes[in.TaskID] = in.Scope
		mu.Unlock()
		return "A point.\nFINAL_VERDICT: approve"
	}
	in := negInput(basePolicy())
	in.Participants = []string{"a", "b:x@y"}
	in.Mode = workflows.NegotiationModeDebate
	in.Debate = debate.Options{Rounds: 2, SummaryThreshold: debate.DefaultSummaryThreshold}
	h.env.ExecuteWorkflow(workflows.Negotiation, in)
	h.result()
	require.Len(t, scopes, 4, "two rounds of two turns")
	for r := 1; r <= 2; r++ {
		for _, agent := range in.Participants {
			assert.Equal(t, workflows.DebateTurnScope("n1", agent), scopes[workflows.DebateTaskID("n1", r, agent)])
		}
	}

	a, err := inference.ParseScope(workflows.DebateTurnScope("n1", "a"))
	require.NoError(t, err)
	b, err := inference.ParseScope(workflows.DebateTurnScope("n1", "b:x@y"))
	require.NoError(t, err)
	assert.Equal(t, []string{"negotiation/n1/a"}, a.Resources)
	assert.Equal(t, []string{"negotiation/n1/b:x@y"}, b.Resources)
	as, err := (&inference.RuleEngine{}).CheckParallelism(a, b)
	require.NoError(t, err)
	v := inference.Decide(as, inference.DefaultThreshold, nil, inference.UnavailableSerialize)
	assert.True(t, v.Parallel, "%s: %s", as.Rule, v.Reason)
}

// TestNegotiationDecisionDoesNotWaitForThePublisher: the evaluation that decides comes while
// the publisher's activity carrying the proposal is still running. The decision is published
// by local activity at once, resending that activity's events first (Resent) so that each
// stream still gets every event in order, and the run ends only once the activity finished.
func TestNegotiationDecisionDoesNotWaitForThePublisher(t *testing.T) {
	h := newNegHarness(t)
	h.slowPublisher = 30 * time.Second
	var errs []error
	p := basePolicy()
	p.Scoring.LlmWeight = 0
	// open and policy go at the start and are published at 30s; the proposal at 31s goes
	// into the publisher's next activity, still running when b's evaluation decides at 32s.
	h.update(31*time.Second, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: "a", ContentType: "application/json", Payload: []byte(`{"x":1}`)}, &errs)
	h.update(32*time.Second, workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{From: "b", Confidence: 0.95}, &errs)
	h.env.ExecuteWorkflow(workflows.Negotiation, negInput(p))
	st := h.result()
	assert.Empty(t, errs)
	assert.Equal(t, workflows.NegotiationDecided, st.Status)
	assert.Equal(t, "consensus", st.Decision.GetDecidedBy())
	// Each event is recorded once (by the publication that did not resend it); the local
	// activity's completed before the proposal's activity did.
	assert.Equal(t, []string{"open", "policy", "evaluate", "decide", "propose"}, h.kinds())
	require.Len(t, h.pubs, 3)
	// The local activity ran before the proposal's activity completed; it resent the proposal.
	flush := h.pubs[1]
	assert.Equal(t, 1, flush.Resent)
	var kinds []string
	for _, ev := range flush.Events {
		kinds = append(kinds, ev.Kind)
	}
	assert.Equal(t, []string{"propose", "evaluate", "decide"}, kinds)
	assert.Equal(t, []int{3, 4, 5}, []int{flush.Events[0].Seq, flush.Events[1].Seq, flush.Events[2].Seq})
	// The run ended once that activity completed, 30s after the proposal.
	assert.Equal(t, "propose", h.pubs[2].Events[0].Kind)
}
