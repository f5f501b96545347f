// Package debate holds the rules of the round-robin debate mode of ADR-011 ("Option A"), run
// as a negotiation of mode "debate" (§17): the options Open's metadata carries, the framing
// each participant's turn receives, the FINAL_VERDICT a final turn ends with, the convergence
// stop ("stop when no new claims appear in a round") and the aggregation of the verdicts
// through the Negotiation Room's voting strategies (003 §6.14.5, package protocol/voting).
//
// Like package negotiation it is pure and deterministic: no I/O, no clock, no randomness, no
// result that depends on Go's map order. Workflow code calls it directly.
package debate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// Debate bounds of ADR-011 ("rounds defaults to 2, is capped at 5"; "Debate requires at least
// two participants") and the marker a final turn ends with.
const (
	// DefaultRounds is the number of rounds when Open names none.
	DefaultRounds = 2
	// MaxRounds is the largest number of rounds.
	MaxRounds = 5
	// VerdictMarker starts the line that carries a final turn's verdict.
	VerdictMarker = "FINAL_VERDICT"
	// MinParticipants is the smallest debate.
	MinParticipants = 2
	// DefaultSummaryThreshold is the transcript size, in bytes, past which turns carry a
	// summary of the earlier rounds plus the last round instead of the whole transcript.
	DefaultSummaryThreshold = 16384
	// MaxSummaryThreshold bounds sw4rm-debate-summary-bytes.
	MaxSummaryThreshold = 1 << 24
)

// Modes of a debate's Result.
const (
	// ModeDebate is a debate of one or more rounds.
	ModeDebate = "debate"
	// ModeParallel is the plain parallel vote (Rounds 0), ADR-011's A/B baseline.
	ModeParallel = "parallel"
)

// Stop reasons of a debate's Result.
const (
	// StopRounds: every round ran.
	StopRounds = "rounds"
	// StopConverged: a round added no new claim.
	StopConverged = "converged"
	// StopTimeout: the debate timed out.
	StopTimeout = "timeout"
	// StopAborted: the debate was aborted.
	StopAborted = "aborted"
	// StopEngineUnreachable: the reasoning engine could not summarize the transcript, and
	// the debate ended with that round (§20: "shorten debates" when the Inference Engine is
	// unreachable).
	StopEngineUnreachable = "engine_unreachable"
)

// ErrInvalidOptions is wrapped by ParseOptions' refusals; the frontend answers it with
// InvalidArgument.
var ErrInvalidOptions = errors.New("invalid debate options")

// Options are a debate's settings, from Open's metadata.
type Options struct {
	// Rounds is the number of rounds, 0..MaxRounds; 0 is the plain parallel vote (every
	// participant answers once, in parallel, with FINAL_VERDICT), ADR-011's A/B baseline.
	Rounds int
	// Strategy is the voting.Strategy name the verdicts are aggregated with.
	Strategy string
	// SummaryThreshold is the transcript size in bytes past which turns carry a Summarize
	// summary of the earlier rounds plus the last round instead of the whole transcript.
	SummaryThreshold int
}

// ParseOptions reads a debate's options from Open's metadata; missing keys take the defaults
// (DefaultRounds, voting.DefaultStrategy, DefaultSummaryThreshold). It refuses
// (ErrInvalidOptions) rounds that are not an integer in 0..5, an unknown strategy and a summary
// threshold that is not an integer in 1..MaxSummaryThreshold.
func ParseOptions(md map[string]string) (Options, error) {
	o := Options{Rounds: DefaultRounds, Strategy: string(voting.DefaultStrategy), SummaryThreshold: DefaultSummaryThreshold}
	if v, ok := md[wire.DebateRoundsKey]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > MaxRounds {
			return Options{}, fmt.Errorf("%w: %s %q is not an integer from 0 to %d (ADR-011: rounds is capped at %d; 0 is the parallel vote)",
				ErrInvalidOptions, wire.DebateRoundsKey, v, MaxRounds, MaxRounds)
		}
		o.Rounds = n
	}
	if v, ok := md[wire.DebateStrategyKey]; ok {
		s, err := voting.ParseStrategy(v)
		if err != nil {
			return Options{}, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, wire.DebateStrategyKey, err)
		}
		o.Strategy = string(s)
	}
	if v, ok := md[wire.DebateSummaryBytesKey]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > MaxSummaryThreshold {
			return Options{}, fmt.Errorf("%w: %s %q is not an integer from 1 to %d", ErrInvalidOptions, wire.DebateSummaryBytesKey, v, MaxSummaryThreshold)
		}
		o.SummaryThreshold = n
	}
	return o, nil
}

// Turn is one participant's contribution to one round.
type Turn struct {
	// Round is the 1-based round; the parallel vote's answers are round 1.
	Round int `json:"round"`
	// Agent is the participant.
	Agent string `json:"agent"`
	// Text is what the participant answered.
	Text string `json:"text"`
}

// TurnParams is the JSON a participant's task receives for one turn (the SDK decodes it).
type TurnParams struct {
	// NegotiationID is the debate's negotiation.
	NegotiationID string `json:"negotiation_id"`
	// Topic is Open's topic.
	Topic string `json:"topic"`
	// Round is this turn's round, 1-based (1 in the parallel vote).
	Round int `json:"round"`
	// Rounds is the number of rounds (0: the parallel vote).
	Rounds int `json:"rounds"`
	// Final says this is the last round: the answer must end with a FINAL_VERDICT line.
	Final bool `json:"final"`
	// Transcript is the debate so far (or the last round only, when Summary is set).
	Transcript []Turn `json:"transcript,omitempty"`
	// Summary summarises the rounds before Transcript, once the transcript outgrew
	// Options.SummaryThreshold.
	Summary string `json:"summary,omitempty"`
	// Instruction frames the turn (see Instruction).
	Instruction string `json:"instruction"`
}

// verdictFormat is the line a final answer must end with.
const verdictFormat = VerdictMarker + ": approve|reject score=<0-10> confidence=<0-1>"

// Instruction is the framing of one turn (ADR-011: "Later rounds receive the transcript under
// Debate transcript so far"; "The final round asks each participant to end with
// FINAL_VERDICT"). rounds 0 is the parallel vote.
func Instruction(round, rounds int, final bool) string {
	// Sentences joined by spaces; fmt.Fprintf into a builder would read as I/O to
	// workflowcheck.
	var parts []string
	switch {
	case rounds <= 0:
		parts = append(parts, "Answer the topic on your own: the other participants answer it in parallel and you will not see their answers.")
	case round <= 1:
		parts = append(parts, fmt.Sprintf("Debate round %d of %d. State your position on the topic and your strongest reasons.", max(round, 1), rounds))
		if !final {
			parts = append(parts, "The other participants will answer them in the next round.")
		}
	default:
		parts = append(parts, fmt.Sprintf("Debate round %d of %d. Debate transcript so far is attached (earlier rounds may be given as a summary): "+
			"engage with the other participants' strongest arguments, say what you now accept and what you still dispute, "+
			"and add only points not made before.", round, rounds))
	}
	if final {
		parts = append(parts, "This is the final round: end your answer with one line of the form \""+verdictFormat+"\".")
	}
	return strings.Join(parts, " ")
}
