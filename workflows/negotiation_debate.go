package workflows

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
)

// DebateTurnContentType is the content type of a debate turn task's params
// (debate.TurnParams as JSON).
const DebateTurnContentType = "application/vnd.sw4rm.debate-turn+json"

// DebateTaskID is the task id of a participant's turn in a round:
// "debate-<negotiation_id>-r<round>-<agent>", with characters SubmitTask refuses replaced by
// "_", and, past 200 bytes, cut and completed with a hash so that turns keep distinct ids.
func DebateTaskID(negotiationID string, round int, agent string) string {
	raw := "debate-" + negotiationID + "-r" + strconv.Itoa(round) + "-" + agent
	id := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, raw)
	if len(id) <= maxDAGTaskIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(raw))
	suffix := "-" + hex.EncodeToString(sum[:8])
	cut := maxDAGTaskIDLen - len(suffix)
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + suffix
}

// DebateTurnScope is the scope of a participant's turn task: the resource
// "negotiation/<negotiation_id>/<agent>", quoted as inference.ParseScope reads it. A debate
// touches no repository (§17), and the turns of a round run in parallel by design, so each
// turn claims a resource of its own: two turns' scopes are disjoint, and admission (§9.3)
// runs them side by side instead of asking a human whether they conflict.
func DebateTurnScope(negotiationID, agent string) string {
	return "resource:" + strconv.Quote("negotiation/"+negotiationID+"/"+agent)
}

// versionDebateTurnScopes marks runs whose turns carry DebateTurnScope; earlier runs used
// the free-text scope "negotiation:<id>/<agent>", which admission found to conflict with the
// other turns of the round (shared words, rule free_text_shared).
const versionDebateTurnScopes = "debate-turn-scopes"

// versionDebateEngineLoss marks runs that shorten a debate whose transcript the reasoning
// engine could not summarize (§20) instead of failing the negotiation; the marker is taken
// only when a summary fails, where earlier runs failed.
const versionDebateEngineLoss = "debate-engine-unreachable"

// runDebate runs ADR-011's debate: rounds of turns, every participant once per round in
// parallel, each turn a scheduler task carrying the transcript of the earlier rounds (or a
// summary of it past Options.SummaryThreshold bytes); the final round asks for FINAL_VERDICT;
// a round that brings no new claim makes the next one final. rounds = 0 is the plain parallel
// vote: one final round without a transcript. The verdicts are aggregated with the room's
// voting strategy and the transcript and verdicts are decided, for the parent to synthesise.
func (w *negotiationRun) runDebate(ctx workflow.Context) error {
	opts := w.in.Debate
	mode, total := "debate", opts.Rounds
	if total == 0 {
		mode, total = "parallel", 1
	}
	var transcript, last []debate.Turn
	stop := debate.StopRounds
	for r := 1; r <= total; r++ {
		final := r == total
		turns, interrupted, err := w.debateRound(ctx, r, total, final, transcript)
		if err != nil {
			return err
		}
		transcript = append(transcript, turns...)
		w.st.Turns = transcript
		last = turns
		if interrupted {
			switch {
			case w.abort != nil:
				return w.aborted(ctx, w.state().Aborted)
			case w.decision != nil:
				return w.decideManually(ctx)
			}
			stop = debate.StopTimeout
			break
		}
		if w.engineLost != "" {
			stop = debate.StopEngineUnreachable // the round just run was asked to be final
			break
		}
		if !final && r >= 2 && debate.Converged(transcript[:len(transcript)-len(turns)], turns) {
			stop, total = debate.StopConverged, r+1
		}
	}
	verdicts := make([]debate.Verdict, 0, len(last))
	for _, t := range last {
		verdicts = append(verdicts, debate.ParseVerdict(t.Agent, t.Text))
	}
	agg, majority := debate.Aggregate(opts.Strategy, verdicts)
	res := debate.Result{Mode: mode, RoundsRun: roundsRun(transcript), StopReason: stop, Transcript: transcript, Verdicts: verdicts,
		Aggregate: agg, Majority: majority}
	b, err := jsonOf(res)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("encode debate result: "+err.Error(), "internal_error", nil)
	}
	score := float32(agg.GetWeightedMean() / 10)
	strategy := opts.Strategy
	if strategy == "" {
		strategy = "default"
	}
	rationale := fmt.Sprintf("%s of %d participants, %d round(s), stop %s; majority %q; %s strategy: weighted mean %.2f of %d verdicts",
		mode, len(w.in.Participants), res.RoundsRun, stop, majority, strategy, agg.GetWeightedMean(), agg.GetVoteCount())
	if w.engineLost != "" {
		rationale += fmt.Sprintf("; shortened to %d of %d rounds because the reasoning engine was unreachable (§20): %s",
			res.RoundsRun, opts.Rounds, w.engineLost)
	}
	return w.decide(ctx, "policy", "application/json", b, score, stop, rationale)
}

// roundsRun counts the distinct rounds of a transcript.
func roundsRun(ts []debate.Turn) int {
	n := 0
	for _, t := range ts {
		n = max(n, t.Round)
	}
	return n
}

// debateRound dispatches round r's turns and waits for them, or for an abort, a Decide or
// the debate_timeout (interrupted=true; unfinished turns are cancelled and left out).
func (w *negotiationRun) debateRound(ctx workflow.Context, r, total int, final bool, transcript []debate.Turn) ([]debate.Turn, bool, error) {
	params := debate.TurnParams{NegotiationID: w.in.NegotiationID, Topic: w.in.Topic, Round: r, Rounds: total, Final: final,
		Instruction: debate.Instruction(r, total, final)}
	if len(transcript) > 0 {
		size := 0
		for _, t := range transcript {
			size += len(t.Text)
		}
		th := w.in.Debate.SummaryThreshold
		summary, err := "", error(nil)
		if th > 0 && size > th {
			summary, err = w.summarize(ctx, transcript)
		}
		switch {
		case err != nil && !w.engineLoss.decide(ctx, versionDebateEngineLoss):
			return nil, false, err // runs recorded before the change failed here
		case err != nil:
			// §20: with the engine unreachable the debate is shortened — this round, with
			// the earlier ones verbatim, is the last — and the result says why.
			w.engineLost = err.Error()
			params.Transcript, params.Rounds, params.Final = transcript, r, true
			params.Instruction = debate.Instruction(r, r, true)
		case summary != "":
			// The summary stands for the earlier rounds; the last round stays verbatim.
			params.Summary = summary
			for _, t := range transcript {
				if t.Round == r-1 {
					params.Transcript = append(params.Transcript, t)
				}
			}
		default:
			params.Transcript = transcript
		}
	}
	body, err := jsonOf(params)
	if err != nil {
		return nil, false, temporal.NewNonRetryableApplicationError("encode turn: "+err.Error(), "internal_error", nil)
	}
	rctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	now := workflow.Now(ctx)
	n := len(w.in.Participants)
	texts := make([]string, n)
	got := make([]bool, n)
	done := 0
	scoped := w.turnScopes.decide(ctx, versionDebateTurnScopes)
	for i, agent := range w.in.Participants {
		taskID := DebateTaskID(w.in.NegotiationID, r, agent)
		scope := "negotiation:" + w.in.NegotiationID + "/" + agent
		if scoped {
			scope = DebateTurnScope(w.in.NegotiationID, agent)
		}
		in := TaskInput{TaskID: taskID, AgentID: agent, Params: body, ContentType: DebateTurnContentType,
			Scope: scope, SubmittedAt: now, HITLTimeout: w.in.HITLTimeout, Revision: TaskRevisionCurrent}
		cctx := workflow.WithChildOptions(rctx, workflow.ChildWorkflowOptions{
			WorkflowID:            TaskWorkflowID(taskID),
			ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			TypedSearchAttributes: temporal.NewSearchAttributes(KindKey.ValueSet(KindTask), AgentIDKey.ValueSet(agent)),
			StaticSummary:         summary("debate %s round %d: turn of agent %s", w.in.NegotiationID, r, agent),
		})
		f := workflow.ExecuteChildWorkflow(cctx, TaskWorkflow, in)
		workflow.Go(rctx, func(c workflow.Context) {
			var s TaskStatus
			// A turn whose task FAILED ends with an error carrying its status (TaskOutcome).
			err := f.Get(c, &s)
			s, ok := TaskOutcome(s, err)
			if ok && s.State == TaskCompleted {
				texts[i], got[i] = s.Result, true
			} else if ok {
				workflow.GetLogger(c).Warn("debate turn did not complete", "task_id", taskID, "state", s.State, "reason", s.Reason)
			}
			done++
		})
	}
	if err := workflow.Await(ctx, func() bool { return done == n || w.debateTimedOut || w.abort != nil || w.decision != nil }); err != nil {
		return nil, false, err
	}
	interrupted := done < n
	var turns []debate.Turn
	for i, agent := range w.in.Participants {
		if !got[i] {
			continue
		}
		t := debate.Turn{Round: r, Agent: agent, Text: texts[i]}
		turns = append(turns, t)
		kind := "counter"
		if r == 1 {
			kind = "propose"
		}
		w.emit(ctx, map[string]any{"kind": kind, "from": agent, "ct": "text/plain; charset=utf-8", "payload_b64": base64.StdEncoding.EncodeToString([]byte(t.Text)), "round": r})
		w.artifactCT("turn", fmt.Sprintf("r%d/%s", r, agent), "text/plain; charset=utf-8", []byte(t.Text))
	}
	return turns, interrupted, nil
}

// summarize asks the ReasoningProxy's Summarize for a summary of the transcript.
func (w *negotiationRun) summarize(ctx workflow.Context, transcript []debate.Turn) (string, error) {
	var acts *activities.Activities
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
	})
	var out string
	err := workflow.ExecuteActivity(actx, acts.SummarizeTranscript, activities.SummarizeInput{NegotiationID: w.in.NegotiationID, Turns: transcript,
		MaxTokens: uint32(max(64, w.in.Debate.SummaryThreshold/8))}).Get(ctx, &out)
	return out, err
}
