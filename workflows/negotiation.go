package workflows

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
)

// Names of the negotiation workflow's messages (§17, docs/negotiation.md).
const (
	// NegotiationDraftUpdate carries a NegotiationDraft (Propose and Counter); its validator
	// refuses drafts out of turn, from non-participants, over budget or invalid (§17.3: an
	// invalid draft consumes no round), so the RPC answers with the reason.
	NegotiationDraftUpdate = "negotiation-draft"
	// NegotiationEvaluateUpdate carries a NegotiationEvaluation (Evaluate, SubmitEvaluation).
	NegotiationEvaluateUpdate = "negotiation-evaluate"
	// NegotiationDecideUpdate carries a NegotiationDecision (Decide).
	NegotiationDecideUpdate = "negotiation-decide"
	// NegotiationAbortUpdate carries a NegotiationAbort (Abort).
	NegotiationAbortUpdate = "negotiation-abort"
	// NegotiationStateQuery returns a NegotiationState.
	NegotiationStateQuery = "negotiation-state"

	// NegotiationModeContract is the propose/counter/evaluate negotiation of §17.
	NegotiationModeContract = "contract"
	// NegotiationModeDebate is ADR-011's round-robin debate (rounds > 0) or the plain parallel
	// vote (rounds = 0), each turn a scheduler task.
	NegotiationModeDebate = "debate"

	// KindNegotiation is the SW4RMKind search-attribute value of negotiations.
	KindNegotiation = "negotiation"
)

// Statuses of a negotiation (NegotiationState.Status).
const (
	NegotiationOpen    = "open"
	NegotiationPaused  = "paused_for_hitl"
	NegotiationDecided = "decided"
	NegotiationAborted = "aborted"
)

// Error types of the negotiation's update validators; the frontend maps them onto gRPC
// codes (permission_denied → PermissionDenied, validation_error → InvalidArgument,
// failed_precondition → FailedPrecondition).
const (
	NegotiationErrPermission   = "permission_denied"
	NegotiationErrValidation   = "validation_error"
	NegotiationErrPrecondition = "failed_precondition"
)

// NegotiationWorkflowID is the workflow of a negotiation: "negotiation/<negotiation_id>".
func NegotiationWorkflowID(negotiationID string) string { return "negotiation/" + negotiationID }

// NegotiationInput opens a negotiation. The frontend derives the effective policy (§17.2,
// negotiation.Derive) before the start, so the workflow runs one fixed policy.
type NegotiationInput struct {
	// NegotiationID, Topic and Participants come from NegotiationOpen; the correlation is the
	// negotiation_id.
	NegotiationID, Topic string
	Participants         []string
	// Intensity is the debate intensity factor.
	Intensity commonpb.DebateIntensity
	// Opener is the principal that opened it ("agent:<id>", "operator:<name>" or
	// "anonymous"); OpenerAgent is the opening agent's id when an agent opened it, which is
	// told every event like the participants (the parent of a debate).
	Opener, OpenerAgent string
	// Profile is the profile hint applied, if any.
	Profile string `json:",omitempty"`
	// Effective is the effective policy; PolicyNotes say what was clamped.
	Effective   *policypb.EffectivePolicy
	PolicyNotes []string `json:",omitempty"`
	// DebateTimeout is the total time bound (a durable timer).
	DebateTimeout time.Duration
	// Schema and Examples configure draft validation (negotiation.ParseConfig).
	Schema   json.RawMessage `json:",omitempty"`
	Examples json.RawMessage `json:",omitempty"`
	// Mode is NegotiationModeContract (default) or NegotiationModeDebate.
	Mode string `json:",omitempty"`
	// Debate holds the debate's options in debate mode.
	Debate debate.Options `json:",omitempty"`
	// HITLTimeout bounds each HITL wait; zero means the HITL default.
	HITLTimeout time.Duration `json:",omitempty"`
	// HITLFallback is the negotiation's own hitl_unavailable_policy (§15.4), chosen with the
	// sw4rm-hitl-unavailable-policy metadata of Open; nil means the deployment's.
	HITLFallback *hitl.Fallback `json:",omitempty"`
}

// NegotiationDraft is a Propose (Counter false) or a Counter.
type NegotiationDraft struct {
	// From is the participant submitting it (the proven caller when there is one).
	From string
	// Counter says the draft is a counter-proposal; the first draft must be a proposal.
	Counter bool
	// ContentType and Payload are the draft; the payload's bytes are kept as they came.
	ContentType string
	Payload     []byte
}

// NegotiationEvaluation is an Evaluate or a SubmitEvaluation of the current version.
type NegotiationEvaluation struct {
	// From is the evaluating participant.
	From string
	// Confidence is in [0, 1].
	Confidence float64
	// Notes are free text.
	Notes string `json:",omitempty"`
	// Report is SubmitEvaluation's report, stored as the round's EvaluationReport.
	Report *policypb.EvaluationReport `json:",omitempty"`
}

// NegotiationDecision is a Decide: the opener's or an operator's result.
type NegotiationDecision struct {
	// By is the principal deciding; Operator says it is an operator, Opener that it is the
	// opener (the frontend proves both).
	By       string
	Operator bool `json:",omitempty"`
	// DecidedBy is the request's decided_by, kept in the record.
	DecidedBy string `json:",omitempty"`
	// ContentType and Result are the decided result; empty Result takes the latest version.
	ContentType string `json:",omitempty"`
	Result      []byte `json:",omitempty"`
}

// NegotiationAbort is an Abort by a participant, the opener or an operator.
type NegotiationAbort struct {
	// By is the principal aborting; Operator says it is an operator.
	By       string
	Operator bool `json:",omitempty"`
	// Reason is why.
	Reason string
}

// NegotiationVersion is one accepted draft (contract_vN).
type NegotiationVersion struct {
	// N is the version number, from 1; Author submitted it; Counter says how.
	N       int
	Author  string
	Counter bool `json:",omitempty"`
	// ContentType and Payload are the draft.
	ContentType string
	Payload     []byte
	// Hash is the hex SHA-256 of content type and payload (oscillation detection).
	Hash string
	// Check is the deterministic validation.
	Check negotiation.Check
	// Delta is the structural change from the previous version.
	Delta *policypb.DeltaSummary
	// Evaluations are the participants' confidences in this version (latest wins), and
	// Notes their notes.
	Evaluations map[string]float64 `json:",omitempty"`
	Notes       map[string]string  `json:",omitempty"`
	// EngineConfidence is the ReasoningProxy's EvaluateDebate confidence against the
	// previous version, when it answered.
	EngineConfidence *float64 `json:",omitempty"`
	// Score is the blended score (negotiation.Blend).
	Score float32
	// Tokens is the draft's estimated token cost (negotiation.Tokens).
	Tokens uint64
	// At is when it was accepted.
	At time.Time
}

// NegotiationState is the answer to NegotiationStateQuery and the workflow's result.
type NegotiationState struct {
	// NegotiationID, Topic, Mode and Participants describe it; Opener opened it.
	NegotiationID, Topic, Mode string
	Participants               []string
	Opener                     string
	// Status is NegotiationOpen, NegotiationPaused, NegotiationDecided or NegotiationAborted.
	Status string
	// Effective is the effective policy (§17.2).
	Effective *policypb.EffectivePolicy
	// Versions are the accepted drafts (contract mode) in order.
	Versions []NegotiationVersion `json:",omitempty"`
	// Turns is the debate transcript (debate mode).
	Turns []debate.Turn `json:",omitempty"`
	// Decision is the DecisionReport once decided or aborted.
	Decision *policypb.DecisionReport `json:",omitempty"`
	// ResultContentType and Result are the decided result.
	ResultContentType string `json:",omitempty"`
	Result            []byte `json:",omitempty"`
	// AbortReason says why it was aborted.
	AbortReason string `json:",omitempty"`
	// AbortCode is the abort's error_code when it has one: "hitl_unavailable" when a human
	// was needed, the HITL component was unavailable and the fallback denied (§15.4).
	AbortCode string `json:",omitempty"`
	// HITLFallback is the negotiation's own hitl_unavailable_policy, if it has one.
	HITLFallback *hitl.Fallback `json:",omitempty"`
	// HITLInvocationID names the HITL wait in progress, if any (SchedulerPolicyService.HitlAction
	// decides it).
	HITLInvocationID string `json:",omitempty"`
	// Events counts the events published so far.
	Events int
	// OpenedAt is when it opened; DeadlineAt when the debate_timeout fires.
	OpenedAt, DeadlineAt time.Time
}

// Negotiation is the scheduler-run negotiation of §17: it publishes open and the effective
// policy (§17.1, §17.2), accepts proposals and counters in turn after validating them
// (§17.3), scores each version, applies the stop rules in their documented order, and ends
// with a decision — by consensus, by the tie-break, or by a human on DEBATE_DEADLOCK — or an
// abort. In debate mode it runs ADR-011's rounds instead, each turn a scheduler task. Every
// event reaches every participant through the router in one order; reports and versions
// are stored as artifacts (§17.4). It never touches repository content (§17).
func Negotiation(ctx workflow.Context, in NegotiationInput) (NegotiationState, error) {
	w := &negotiationRun{in: in}
	st, err := w.run(ctx)
	// An update being applied finishes, and its caller gets the answer, before the run ends.
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	return st, err
}

type negotiationRun struct {
	in     NegotiationInput
	cfg    negotiation.Config
	st     NegotiationState
	policy *policypb.NegotiationPolicy

	// pending are events not yet published; artifacts likewise. publishing is set while the
	// publisher's activity runs; publishErr is its last failure.
	pending    []activities.NegotiationEvent
	artifacts  []activities.NegotiationArtifact
	publishing bool
	publishErr error
	// inflight are the events of the publisher's activity while it runs. holding is set
	// while flush publishes by local activity: the publisher takes nothing new meanwhile.
	// flushAhead is whether this run's flush runs ahead of the publisher (see flush).
	inflight   []activities.NegotiationEvent
	holding    bool
	flushAhead tristate
	// dirty is set by every handler; the main loop wakes on it.
	dirty bool
	// fresh lists versions whose engine evaluation is still to be asked.
	fresh []int
	// decision and abort are requested by Decide and Abort.
	decision *NegotiationDecision
	abort    *NegotiationAbort
	// paused refuses drafts while a HITL gate waits; gatedAt is the version the
	// PauseBetweenRounds gate last paused after.
	paused  bool
	gatedAt int
	// roundStart is when the current round began; timedOut flags.
	roundStart                    time.Time
	roundTimedOut, debateTimedOut bool
	tokens                        uint64
	// turnScopes is whether this run gives debate turns their disjoint resource scopes
	// (DebateTurnScope); runs recorded before that change keep the free-text scope.
	turnScopes tristate
	// engineLoss is whether this run shortens a debate when the reasoning engine is
	// unreachable (versionDebateEngineLoss); engineLost is why it did, "" until then.
	engineLoss tristate
	engineLost string
}

func (w *negotiationRun) run(ctx workflow.Context) (NegotiationState, error) {
	in := w.in
	now := workflow.Now(ctx)
	w.policy = in.Effective.GetPolicy()
	w.st = NegotiationState{NegotiationID: in.NegotiationID, Topic: in.Topic, Mode: in.Mode, Participants: in.Participants,
		Opener: in.Opener, Status: NegotiationOpen, Effective: in.Effective, OpenedAt: now, DeadlineAt: now.Add(in.DebateTimeout),
		HITLFallback: in.HITLFallback}
	if w.st.Mode == "" {
		w.st.Mode = NegotiationModeContract
	}
	w.roundStart = now
	cfg, err := negotiation.ParseConfig(in.Schema, in.Examples)
	if err != nil {
		// Open checked it; a history from other code must not run with a broken config.
		return w.st, temporal.NewNonRetryableApplicationError("negotiation config: "+err.Error(), NegotiationErrValidation, nil)
	}
	w.cfg = cfg
	// open and policy are queued before any handler exists: a draft that arrived with the
	// start (an opener proposing right after Open) is run by the SDK as soon as its handler
	// is registered, and must come after them (§17.1).
	w.emit(ctx, map[string]any{"kind": "open", "topic": in.Topic, "corr": in.NegotiationID})
	pol := map[string]any{"kind": "policy", "negotiation_id": in.NegotiationID, "policy": w.policy}
	if in.Profile != "" {
		pol["profile"] = in.Profile
	}
	if in.HITLFallback != nil {
		// Only when chosen: the policy event of a negotiation without one keeps its bytes.
		pol["hitl_unavailable_policy"] = in.HITLFallback
	}
	w.emit(ctx, pol)
	if b, err := jsonOf(in.Effective); err == nil {
		w.artifact("policy", "effective", b)
	}
	if in.HITLFallback != nil {
		// Stored beside the effective policy, which is canonical and has no field for it.
		if b, err := jsonOf(in.HITLFallback); err == nil {
			w.artifact("policy", "hitl-unavailable", b)
		}
	}
	if err := workflow.SetQueryHandler(ctx, NegotiationStateQuery, func() (NegotiationState, error) { return w.st, nil }); err != nil {
		return w.st, err
	}
	if err := w.handlers(ctx); err != nil {
		return w.st, err
	}
	workflow.Go(ctx, w.publisher)
	// debate_timeout is one durable timer for the whole negotiation (§17).
	tctx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	workflow.Go(tctx, func(c workflow.Context) {
		if workflow.NewTimer(c, in.DebateTimeout).Get(c, nil) == nil {
			w.debateTimedOut, w.dirty = true, true
		}
	})
	if w.st.Mode == NegotiationModeDebate {
		err = w.runDebate(ctx)
	} else {
		err = w.runContract(ctx)
	}
	if ferr := w.flush(ctx); ferr != nil && err == nil {
		err = ferr
	}
	return w.st, err
}

// handlers registers the updates. Validators are pure: a refused update leaves no trace in
// the history.
func (w *negotiationRun) handlers(ctx workflow.Context) error {
	closed := func() error {
		if w.st.Status == NegotiationDecided || w.st.Status == NegotiationAborted {
			return refuse(NegotiationErrPrecondition, "negotiation %s is %s", w.in.NegotiationID, w.st.Status)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, NegotiationDraftUpdate,
		func(ctx workflow.Context, d NegotiationDraft) (int, error) {
			return w.addVersion(ctx, d), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, d NegotiationDraft) error {
			if err := w.outsider(d.From); err != nil {
				return err
			}
			if err := closed(); err != nil {
				return err
			}
			return w.checkDraft(d)
		}},
	); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, NegotiationEvaluateUpdate,
		func(ctx workflow.Context, e NegotiationEvaluation) (int, error) {
			v := &w.st.Versions[len(w.st.Versions)-1]
			if v.Evaluations == nil {
				v.Evaluations, v.Notes = map[string]float64{}, map[string]string{}
			}
			v.Evaluations[e.From], v.Notes[e.From] = e.Confidence, e.Notes
			w.rescore(v)
			w.emit(ctx, map[string]any{"kind": "evaluate", "from": e.From, "score": e.Confidence, "notes": e.Notes})
			rep := e.Report
			if rep == nil {
				rep = &policypb.EvaluationReport{FromAgent: e.From, LlmConfidence: float32(e.Confidence), Notes: e.Notes}
			}
			rep.DeterministicScore, rep.Delta = v.Check.Deterministic, v.Delta
			if b, err := jsonOf(rep); err == nil {
				w.artifact("evaluation", fmt.Sprintf("v%d/%s", v.N, e.From), b)
			}
			w.dirty = true
			return v.N, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, e NegotiationEvaluation) error {
			if err := w.outsider(e.From); err != nil {
				return err
			}
			if err := closed(); err != nil {
				return err
			}
			if w.st.Mode != NegotiationModeContract {
				return refuse(NegotiationErrPrecondition, "negotiation %s is a debate: its participants answer their turn tasks instead", w.in.NegotiationID)
			}
			if len(w.st.Versions) == 0 {
				return refuse(NegotiationErrPrecondition, "negotiation %s has no proposal to evaluate yet", w.in.NegotiationID)
			}
			if !(e.Confidence >= 0 && e.Confidence <= 1) {
				return refuse(NegotiationErrValidation, "confidence_score %v is outside [0, 1]", e.Confidence)
			}
			return nil
		}},
	); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, NegotiationDecideUpdate,
		func(ctx workflow.Context, d NegotiationDecision) (string, error) {
			w.decision = &d
			w.dirty = true
			return w.st.Status, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, d NegotiationDecision) error {
			if err := closed(); err != nil {
				return err
			}
			if w.decision != nil || w.abort != nil {
				return refuse(NegotiationErrPrecondition, "negotiation %s is already being closed", w.in.NegotiationID)
			}
			if len(d.Result) == 0 && len(w.st.Versions) == 0 && w.st.Mode == NegotiationModeContract {
				return refuse(NegotiationErrValidation, "result is empty and negotiation %s has no version to decide on", w.in.NegotiationID)
			}
			return nil
		}},
	); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, NegotiationAbortUpdate,
		func(ctx workflow.Context, a NegotiationAbort) (string, error) {
			w.abort = &a
			w.dirty = true
			return w.st.Status, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, a NegotiationAbort) error {
			if err := closed(); err != nil {
				return err
			}
			if w.abort != nil {
				return refuse(NegotiationErrPrecondition, "negotiation %s is already being aborted", w.in.NegotiationID)
			}
			return nil
		}},
	)
}

// outsider refuses a caller who is not a participant, before any other check of a draft or an
// evaluation: a refusal must not tell an outsider how far the negotiation has got (closed,
// a proposal already made, whose turn it is).
func (w *negotiationRun) outsider(from string) error {
	if !slices.Contains(w.in.Participants, from) {
		return refuse(NegotiationErrPermission, "%s is not a participant of negotiation %s", from, w.in.NegotiationID)
	}
	return nil
}

// refuse is a validator's refusal; its type travels to the frontend.
func refuse(typ, format string, args ...any) error {
	return temporal.NewApplicationError(fmt.Sprintf(format, args...), typ)
}

// checkDraft is the draft validator: turn, rounds, budget (negotiation.CanDraft) and the
// deterministic validation (negotiation.Validate), none of which consumes a round.
func (w *negotiationRun) checkDraft(d NegotiationDraft) error {
	if w.st.Mode != NegotiationModeContract {
		return refuse(NegotiationErrPrecondition, "negotiation %s is a debate: its participants answer their turn tasks instead", w.in.NegotiationID)
	}
	if w.paused {
		return refuse(NegotiationErrPrecondition, "negotiation %s is paused for a human decision (HITL %s); drafts are refused until it continues",
			w.in.NegotiationID, w.st.HITLInvocationID)
	}
	first := len(w.st.Versions) == 0
	if first && d.Counter {
		return refuse(NegotiationErrPrecondition, "negotiation %s has no proposal yet: the first draft is a Propose", w.in.NegotiationID)
	}
	if !first && !d.Counter {
		return refuse(NegotiationErrPrecondition, "negotiation %s already has a proposal (v%d): answer it with Counter", w.in.NegotiationID, len(w.st.Versions))
	}
	if err := negotiation.CanDraft(w.state(), d.From, negotiation.Tokens(d.Payload)); err != nil {
		typ := NegotiationErrPrecondition
		if errors.Is(err, negotiation.ErrNotParticipant) {
			typ = NegotiationErrPermission
		}
		return refuse(typ, "%v", err)
	}
	if c, refused := negotiation.Validate(w.cfg, w.policy.GetScoring(), d.ContentType, d.Payload); refused {
		return refuse(NegotiationErrValidation, "draft refused (§17.3; no round consumed): %s", strings.Join(c.Reasons, "; "))
	}
	return nil
}

// addVersion accepts a validated draft as the next version and publishes it.
func (w *negotiationRun) addVersion(ctx workflow.Context, d NegotiationDraft) int {
	now := workflow.Now(ctx)
	check, _ := negotiation.Validate(w.cfg, w.policy.GetScoring(), d.ContentType, d.Payload)
	var prev []byte
	if n := len(w.st.Versions); n > 0 {
		prev = w.st.Versions[n-1].Payload
	}
	sum := sha256.Sum256(append([]byte(d.ContentType+"\x00"), d.Payload...))
	v := NegotiationVersion{N: len(w.st.Versions) + 1, Author: d.From, Counter: d.Counter, ContentType: d.ContentType, Payload: d.Payload,
		Hash: hex.EncodeToString(sum[:]), Check: check, Delta: negotiation.Delta(prev, d.Payload, d.ContentType),
		Tokens: negotiation.Tokens(d.Payload), At: now}
	w.rescore(&v)
	w.st.Versions = append(w.st.Versions, v)
	w.tokens += v.Tokens
	w.roundStart, w.roundTimedOut = now, false
	kind := "propose"
	if d.Counter {
		kind = "counter"
	}
	w.emit(ctx, map[string]any{"kind": kind, "from": d.From, "ct": d.ContentType, "payload_b64": base64.StdEncoding.EncodeToString(d.Payload)})
	w.artifactCT("contract", fmt.Sprintf("v%d", v.N), d.ContentType, d.Payload)
	if v.N > 1 {
		if b, err := jsonOf(v.Delta); err == nil {
			w.artifact("diff", fmt.Sprintf("v%d_to_v%d", v.N-1, v.N), b)
		}
		w.fresh = append(w.fresh, v.N)
	}
	w.dirty = true
	return v.N
}

// rescore recomputes a version's blended score from its checks and confidences, the
// author's own evaluation left out (a participant does not grade its own draft).
func (w *negotiationRun) rescore(v *NegotiationVersion) {
	var cs []float64
	for _, p := range w.in.Participants { // participant order: deterministic
		if c, ok := v.Evaluations[p]; ok && p != v.Author {
			cs = append(cs, c)
		}
	}
	if v.EngineConfidence != nil {
		cs = append(cs, *v.EngineConfidence)
	}
	v.Score = negotiation.Blend(v.Check.Deterministic, cs, w.policy.GetScoring().GetLlmWeight())
}

// state is the stop rules' view of the negotiation.
func (w *negotiationRun) state() negotiation.State {
	s := negotiation.State{Participants: w.in.Participants, Policy: w.policy, TokensUsed: w.tokens,
		RoundTimedOut: w.roundTimedOut, DebateTimedOut: w.debateTimedOut}
	if w.abort != nil {
		s.Aborted = w.abort.Reason
		if s.Aborted == "" {
			s.Aborted = "aborted by " + w.abort.By
		}
	}
	for _, v := range w.st.Versions {
		s.Versions = append(s.Versions, negotiation.Version{N: v.N, Author: v.Author, Hash: v.Hash, Check: v.Check, Delta: v.Delta,
			Evaluations: v.Evaluations, EngineConfidence: v.EngineConfidence, Score: v.Score, Tokens: v.Tokens})
	}
	return s
}

// runContract is the propose/counter/evaluate loop.
func (w *negotiationRun) runContract(ctx workflow.Context) error {
	roundTimeout := time.Duration(w.policy.GetRoundTimeoutMs()) * time.Millisecond
	for {
		if err := w.evaluateFresh(ctx); err != nil {
			return err
		}
		if w.decision != nil {
			return w.decideManually(ctx)
		}
		verdict := negotiation.Evaluate(w.state())
		if verdict.Stop {
			return w.stop(ctx, verdict)
		}
		if w.policy.GetHitl().GetMode() == negotiation.HitlPauseBetweenRounds && w.roundComplete() && w.gatedAt < len(w.st.Versions) {
			w.gatedAt = len(w.st.Versions)
			if err := w.pauseBetweenRounds(ctx); err != nil {
				return err
			}
			continue
		}
		left := w.roundStart.Add(roundTimeout).Sub(workflow.Now(ctx))
		if left <= 0 {
			w.roundTimedOut = true
			continue
		}
		ok, err := workflow.AwaitWithTimeout(ctx, left, func() bool { return w.dirty || w.debateTimedOut })
		if err != nil {
			return err
		}
		w.dirty = false
		if !ok {
			w.roundTimedOut = true
		}
	}
}

// roundComplete says every participant but the latest version's author has evaluated it.
func (w *negotiationRun) roundComplete() bool {
	if len(w.st.Versions) == 0 {
		return false
	}
	v := w.st.Versions[len(w.st.Versions)-1]
	for _, p := range w.in.Participants {
		if _, ok := v.Evaluations[p]; !ok && p != v.Author {
			return false
		}
	}
	return true
}

// evaluateFresh asks the ReasoningProxy's EvaluateDebate about each new counter against the
// version before it (§17.3: the optional inference confidence, blended by llm_weight). An
// engine that does not answer leaves the version scored without it.
func (w *negotiationRun) evaluateFresh(ctx workflow.Context) error {
	if len(w.fresh) == 0 || w.policy.GetScoring().GetLlmWeight() == 0 {
		w.fresh = nil
		return nil
	}
	var acts *activities.Activities
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	})
	for _, n := range w.fresh {
		a, b := w.st.Versions[n-2], w.st.Versions[n-1]
		var out activities.DebateEvaluation
		err := workflow.ExecuteActivity(actx, acts.EvaluateNegotiationDrafts, activities.DebateEvaluationInput{
			NegotiationID: w.in.NegotiationID, ProposalA: string(a.Payload), ProposalB: string(b.Payload), Intensity: w.in.Intensity.String(),
		}).Get(ctx, &out)
		if err != nil {
			workflow.GetLogger(ctx).Warn("EvaluateDebate failed; the version is scored without it", "version", n, "error", err)
			continue
		}
		c := out.Confidence
		v := &w.st.Versions[n-1]
		v.EngineConfidence = &c
		w.rescore(v)
	}
	w.fresh = nil
	return nil
}

// stop ends the negotiation on a stop rule: acceptance (through the PauseOnFinalAccept gate
// when the policy has it), an abort, or a deadlock resolved by the tie-break or a human.
func (w *negotiationRun) stop(ctx workflow.Context, verdict negotiation.Verdict) error {
	switch {
	case verdict.Reason == negotiation.StopAborted:
		return w.aborted(ctx, w.state().Aborted)
	case verdict.Accept:
		v := w.st.Versions[len(w.st.Versions)-1]
		if w.policy.GetHitl().GetMode() == negotiation.HitlPauseOnFinalAccept {
			return w.finalAcceptGate(ctx, v, verdict)
		}
		return w.decide(ctx, "consensus", v.ContentType, v.Payload, v.Score, verdict.Reason,
			fmt.Sprintf("v%d by %s accepted by every participant: %s", v.N, v.Author, verdict.Detail))
	}
	v, accept, ok := negotiation.TieBreak(w.state())
	if !ok {
		return w.aborted(ctx, fmt.Sprintf("%s with no proposal: %s", verdict.Reason, verdict.Detail))
	}
	if accept {
		return w.decide(ctx, "policy", w.st.Versions[v.N-1].ContentType, w.st.Versions[v.N-1].Payload, v.Score, verdict.Reason,
			fmt.Sprintf("tie-break after %s (%s): v%d by %s has the best score %.3f, at or above the threshold %.3f",
				verdict.Reason, verdict.Detail, v.N, v.Author, v.Score, w.policy.GetScoreThreshold()))
	}
	return w.deadlock(ctx, w.st.Versions[v.N-1], verdict)
}

// deadlock escalates to a human with reason DEBATE_DEADLOCK (§17, §15): approve decides the
// best version, modify decides the human's patch, deny (or a fallback that is not approve)
// aborts. The fallback applied when no human answers is recorded (§15.4).
func (w *negotiationRun) deadlock(ctx workflow.Context, best NegotiationVersion, verdict negotiation.Verdict) error {
	facts := []string{fmt.Sprintf("negotiation %s on %q stopped: %s (%s)", w.in.NegotiationID, w.in.Topic, verdict.Reason, verdict.Detail),
		fmt.Sprintf("best version v%d by %s scores %.3f, below the threshold %.3f", best.N, best.Author, best.Score, w.policy.GetScoreThreshold())}
	for _, v := range w.st.Versions {
		facts = append(facts, fmt.Sprintf("v%d by %s: score %.3f, delta %.3f %v", v.N, v.Author, v.Score, v.Delta.GetMagnitude(), v.Delta.GetChangedPaths()))
	}
	// §15.4 AUTO_DECIDE_THRESHOLD judges the highest-scoring proposal: the tie-break's best.
	out, interrupted, err := w.askHuman(ctx, "DEBATE_DEADLOCK", facts, "deny", best.Score)
	if err != nil || interrupted {
		return err
	}
	why := fmt.Sprintf("%s after %s: %s by %s — %s", "DEBATE_DEADLOCK", verdict.Reason, out.Decision, outcomeBy(out), out.Rationale)
	switch out.Decision {
	case hitl.Approve:
		return w.decide(ctx, "hitl", best.ContentType, best.Payload, best.Score, verdict.Reason, why+fmt.Sprintf("; v%d decided", best.N))
	case hitl.Modify:
		return w.decide(ctx, "hitl", best.ContentType, out.Patch, best.Score, verdict.Reason, why+"; the human's modification decided")
	}
	w.unavailableAbort(out)
	return w.aborted(ctx, why)
}

// finalAcceptGate asks a human before an accepted version is decided (PauseOnFinalAccept).
func (w *negotiationRun) finalAcceptGate(ctx workflow.Context, v NegotiationVersion, verdict negotiation.Verdict) error {
	facts := []string{fmt.Sprintf("negotiation %s on %q reached acceptance of v%d by %s (score %.3f): %s", w.in.NegotiationID, w.in.Topic, v.N, v.Author, v.Score, verdict.Detail)}
	out, interrupted, err := w.askHuman(ctx, "MANUAL_OVERRIDE", facts, "approve", v.Score)
	if err != nil || interrupted {
		return err
	}
	why := fmt.Sprintf("final accept gate: %s by %s — %s", out.Decision, outcomeBy(out), out.Rationale)
	switch out.Decision {
	case hitl.Approve:
		return w.decide(ctx, "consensus", v.ContentType, v.Payload, v.Score, verdict.Reason, fmt.Sprintf("v%d accepted by every participant; %s", v.N, why))
	case hitl.Modify:
		return w.decide(ctx, "hitl", v.ContentType, out.Patch, v.Score, verdict.Reason, why+"; the human's modification decided")
	}
	w.unavailableAbort(out)
	return w.aborted(ctx, why)
}

// unavailableAbort gives the abort that follows a HITL outcome its error_code when the
// outcome is a fallback applied because the HITL component was unavailable (§15.4
// DENY_BY_DEFAULT: "abort the negotiation with error_code=hitl_unavailable").
func (w *negotiationRun) unavailableAbort(out hitl.Outcome) {
	if out.Fallback && out.HitlUnavailable {
		w.st.AbortCode = hitl.UnavailableCode
	}
}

// pauseBetweenRounds holds drafts until a human lets the negotiation continue
// (PauseBetweenRounds): approve or defer continues, modify decides the patch, deny aborts.
func (w *negotiationRun) pauseBetweenRounds(ctx workflow.Context) error {
	v := w.st.Versions[len(w.st.Versions)-1]
	facts := []string{fmt.Sprintf("negotiation %s on %q finished round %d: v%d by %s scores %.3f", w.in.NegotiationID, w.in.Topic, v.N, v.N, v.Author, v.Score)}
	out, interrupted, err := w.askHuman(ctx, "MANUAL_OVERRIDE", facts, "approve", v.Score)
	if err != nil || interrupted {
		return err
	}
	switch out.Decision {
	case hitl.Deny:
		w.abort = &NegotiationAbort{By: outcomeBy(out), Reason: fmt.Sprintf("paused between rounds; denied by %s — %s", outcomeBy(out), out.Rationale)}
	case hitl.Modify:
		w.decision = &NegotiationDecision{By: outcomeBy(out), DecidedBy: "hitl", ContentType: v.ContentType, Result: out.Patch, Operator: true}
	}
	w.roundStart = workflow.Now(ctx) // the human's time is not the participants' round
	w.dirty = true
	return nil
}

// askHuman raises a HITL wait while drafts are refused, and returns its outcome. An abort or
// a Decide that arrives meanwhile interrupts it (interrupted=true; the loop then applies it).
// The wait's fallback is the negotiation's own hitl_unavailable_policy, or else the
// deployment's; score is what AUTO_DECIDE_THRESHOLD compares with its threshold (§15.4).
func (w *negotiationRun) askHuman(ctx workflow.Context, reason string, facts []string, suggested string, score float32) (hitl.Outcome, bool, error) {
	if err := w.flush(ctx); err != nil {
		return hitl.Outcome{}, false, err
	}
	inv := hitl.Invocation{
		ReasonType:      reason,
		CorrelationID:   w.in.NegotiationID,
		Subject:         hitl.Subject{NegotiationID: w.in.NegotiationID},
		Context:         hitl.Context{Facts: facts},
		ProposedActions: []string{"approve", "deny", "modify"},
		SuggestedAction: suggested,
		Timeout:         w.in.HITLTimeout,
	}
	if w.in.HITLFallback != nil {
		inv.Fallback = *w.in.HITLFallback
	}
	inv.Fallback.Score = float64(score)
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&inv.InvocationID); err != nil {
		return hitl.Outcome{}, false, err
	}
	w.paused, w.st.Status, w.st.HITLInvocationID = true, NegotiationPaused, inv.InvocationID
	defer func() { w.paused, w.st.HITLInvocationID = false, "" }()
	hctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	var out hitl.Outcome
	var herr error
	done := false
	workflow.Go(hctx, func(c workflow.Context) {
		out, herr = RequestHITL(c, inv)
		done = true
	})
	if err := workflow.Await(ctx, func() bool { return done || w.abort != nil || w.decision != nil }); err != nil {
		return out, false, err
	}
	w.st.Status = NegotiationOpen
	if !done {
		cancel() // the interruption wins; the human's wait is withdrawn
		return out, true, nil
	}
	return out, false, herr
}

// outcomeBy names who decided a HITL outcome.
func outcomeBy(o hitl.Outcome) string {
	if o.Fallback {
		return "fallback " + o.FallbackPolicy + " (" + o.FallbackReason + ")"
	}
	return o.DecidedBy
}

// decideManually applies a Decide (the opener's or an operator's) or a human's modification.
func (w *negotiationRun) decideManually(ctx workflow.Context) error {
	d := w.decision
	ct, result := d.ContentType, d.Result
	var score float32
	if n := len(w.st.Versions); n > 0 {
		score = w.st.Versions[n-1].Score
		if len(result) == 0 {
			ct, result = w.st.Versions[n-1].ContentType, w.st.Versions[n-1].Payload
		}
	}
	by := d.DecidedBy
	if by == "" {
		by = d.By
	}
	return w.decide(ctx, by, ct, result, score, "decided", fmt.Sprintf("decided by %s", d.By))
}

// decide records the result: the decide event, the DecisionReport artifact and the state.
func (w *negotiationRun) decide(ctx workflow.Context, by, ct string, result []byte, score float32, stopReason, rationale string) error {
	w.st.Status, w.st.ResultContentType, w.st.Result = NegotiationDecided, ct, result
	w.st.Decision = &policypb.DecisionReport{DecidedBy: by, FinalScore: score, Rationale: rationale, StopReason: stopReason}
	w.emit(ctx, map[string]any{"kind": "decide", "by": by, "ct": ct, "result_b64": base64.StdEncoding.EncodeToString(result)})
	if b, err := jsonOf(w.st.Decision); err == nil {
		w.artifact("decision", "final", b)
	}
	w.artifactCT("result", "final", ct, result)
	return w.flush(ctx)
}

// aborted ends the negotiation with an abort event and a DecisionReport saying why.
func (w *negotiationRun) aborted(ctx workflow.Context, reason string) error {
	w.st.Status, w.st.AbortReason = NegotiationAborted, reason
	var score float32
	if n := len(w.st.Versions); n > 0 {
		score = w.st.Versions[n-1].Score
	}
	w.st.Decision = &policypb.DecisionReport{DecidedBy: "abort", FinalScore: score, Rationale: reason, StopReason: negotiation.StopAborted}
	ev := map[string]any{"kind": "abort", "reason": reason}
	if w.st.AbortCode != "" {
		ev["error_code"] = w.st.AbortCode
	}
	w.emit(ctx, ev)
	if b, err := jsonOf(w.st.Decision); err == nil {
		w.artifact("decision", "final", b)
	}
	return w.flush(ctx)
}

// emit queues an event; flush publishes the queue in order. Every event carries the §17.1
// fields plus seq (its position, from 1) and negotiation_id, which receivers may ignore.
func (w *negotiationRun) emit(ctx workflow.Context, ev map[string]any) {
	w.st.Events++
	ev["ts"] = workflow.Now(ctx).UTC().Format(time.RFC3339Nano)
	ev["seq"] = w.st.Events
	ev["negotiation_id"] = w.in.NegotiationID
	// encoding/json sorts map keys: the bytes are the same on every replay.
	b, err := jsonOf(ev)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"kind":%q,"seq":%d,"error":"unencodable event"}`, ev["kind"], w.st.Events))
	}
	w.pending = append(w.pending, activities.NegotiationEvent{Seq: w.st.Events, Kind: fmt.Sprint(ev["kind"]), JSON: b})
	w.dirty = true
}

func (w *negotiationRun) artifact(kind, version string, content []byte) {
	w.artifactCT(kind, version, "application/json", content)
}

func (w *negotiationRun) artifactCT(kind, version, ct string, content []byte) {
	w.artifacts = append(w.artifacts, activities.NegotiationArtifact{Kind: kind, Version: version, ContentType: ct, Content: content})
}

// recipients are the participants and the opening agent, each once, in that order.
func (w *negotiationRun) recipients() []string {
	to := slices.Clone(w.in.Participants)
	if a := w.in.OpenerAgent; a != "" && !slices.Contains(to, a) {
		to = append(to, a)
	}
	return to
}

// publisher publishes the queued events and artifacts in order, one activity at a time, for
// the whole negotiation. A regular activity, not a local one: a local activity would hold the
// workflow task — and with it the answer to the update that queued the event — until the
// store writes finish; this way Propose, Counter and Evaluate answer as soon as the
// negotiation has applied them, and the events follow. Message ids derive from the
// negotiation and the event's seq, so a retry delivers nothing twice.
func (w *negotiationRun) publisher(ctx workflow.Context) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, MaximumInterval: 30 * time.Second},
	})
	var acts *activities.Activities
	for {
		// holding is only ever set in runs that take versionNegotiationFlushAhead, so earlier
		// runs wait on the same condition as they did.
		if err := workflow.Await(ctx, func() bool { return !w.holding && (len(w.pending) > 0 || len(w.artifacts) > 0) }); err != nil {
			return
		}
		in := activities.NegotiationPublishInput{NegotiationID: w.in.NegotiationID, Recipients: w.recipients(), Events: w.pending, Artifacts: w.artifacts}
		w.inflight, w.pending, w.artifacts, w.publishing = w.pending, nil, nil, true
		if err := workflow.ExecuteActivity(actx, acts.PublishNegotiation, in).Get(ctx, nil); err != nil {
			w.publishErr = err
		}
		w.inflight, w.publishing = nil, false
	}
}

// flush publishes everything queued so far, by a local activity: at the end of a negotiation
// (the decide or abort event) or before a human is asked nothing else waits on this workflow
// task, and the decision then reaches the participants without an activity's dispatch round
// trip. It returns once the publisher's activity, if one runs, has finished too.
func (w *negotiationRun) flush(ctx workflow.Context) error {
	ahead := w.flushAhead.decide(ctx, versionNegotiationFlushAhead)
	if !ahead {
		// Runs recorded before versionNegotiationFlushAhead wait for the publisher first.
		if err := workflow.Await(ctx, func() bool { return w.publishErr != nil || !w.publishing }); err != nil {
			return err
		}
	}
	if w.publishErr != nil {
		return w.publishErr
	}
	if len(w.pending) > 0 || len(w.artifacts) > 0 {
		in := activities.NegotiationPublishInput{NegotiationID: w.in.NegotiationID, Recipients: w.recipients(), Events: w.pending, Artifacts: w.artifacts}
		if ahead {
			// The decision must not wait for the publisher's activity (its dispatch, its
			// writes, then a workflow task) before it is even sent. The events that activity
			// carries go again, first: each recipient's admissions are ordered and their
			// message_ids idempotent, so whichever write comes second finds them admitted,
			// and every stream still gets each event once, in seq order. They are audited
			// by that activity only (Resent).
			in.Events = append(slices.Clone(w.inflight), w.pending...)
			in.Resent = len(w.inflight)
			// The publisher takes nothing new until the local activity has sent it.
			w.holding = true
			defer func() { w.holding = false }()
		}
		w.pending, w.artifacts = nil, nil
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, MaximumInterval: 30 * time.Second},
		})
		var acts *activities.Activities
		if err := workflow.ExecuteLocalActivity(lctx, acts.PublishNegotiation, in).Get(ctx, nil); err != nil || !ahead {
			return err
		}
	}
	if !ahead {
		return nil
	}
	// The artifacts of an activity still running are stored once it has finished; the run
	// does not end, nor ask a human, before.
	if err := workflow.Await(ctx, func() bool { return w.publishErr != nil || !w.publishing }); err != nil {
		return err
	}
	return w.publishErr
}

// versionNegotiationFlushAhead marks runs whose flush publishes by local activity at once,
// resending the events of the publisher's activity in flight, instead of waiting for that
// activity first (see flush): earlier histories record the wait, and a publisher that took the
// events queued meanwhile into an activity of its own.
const versionNegotiationFlushAhead = "negotiation-flush-ahead"

// NegotiationStartOptions are the start options of negotiation/<negotiation_id> on
// taskQueue: a negotiation_id is used once.
func NegotiationStartOptions(negotiationID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: NegotiationWorkflowID(negotiationID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Open tells a retried Open from a conflicting one, so it must learn that the id is
		// taken rather than be handed the existing run.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(KindKey.ValueSet(KindNegotiation)),
		StaticSummary:                            summary("negotiation %s (§17)", negotiationID),
	}
}

// jsonOf encodes an event, report or turn. encoding/json is deterministic here (struct
// fields in order, map keys sorted); workflowcheck flags it only because its reflection
// reaches runtime internals.
func jsonOf(v any) ([]byte, error) {
	//workflowcheck:ignore
	return json.Marshal(v)
}
