package deliberation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// DebateRounds is the rounds of the harness's debate mode (ADR-011's default); the parallel
// vote is rounds 0.
const DebateRounds = 2

// LiftThreshold is ADR-011's bar, in accuracy points: "If the lift is < 10 % accuracy, defer
// Option A indefinitely."
const LiftThreshold = 10.0

// Outcome is one mode's result on one fixture.
type Outcome struct {
	// NegotiationID is the negotiation that ran it.
	NegotiationID string
	// Mode, RoundsRun and StopReason are the debate.Result's.
	Mode       string
	RoundsRun  int
	StopReason string
	// Majority is the most common verdict label, "" when tied.
	Majority string
	// Verdict is the majority as Good, Bad or NoVerdict; Correct says it is the fixture's.
	Verdict string
	Correct bool
	// Labels are the reviewers' final verdict labels and Positions their first-round
	// positions (a debate's only), both in Roles order.
	Labels    []string
	Positions []string
	// Reasons are, per role, the lines of its final turn that changed or held its mind.
	Reasons map[string][]string
	// Transcript is every turn, the role standing for the agent.
	Transcript []debate.Turn
}

// Row is one fixture's line of the harness's table.
type Row struct {
	// Fixture is the design and its known verdict.
	Fixture Fixture
	// Debate and Vote are the two modes' outcomes.
	Debate, Vote Outcome
}

// HarnessResult is the A/B harness's outcome.
type HarnessResult struct {
	// Rows are the fixtures' results, in Fixtures order.
	Rows []Row
	// DebateCorrect and VoteCorrect count the fixtures each mode got right.
	DebateCorrect, VoteCorrect int
	// DebateAccuracy and VoteAccuracy are the shares right, in percent.
	DebateAccuracy, VoteAccuracy float64
	// Lift is DebateAccuracy − VoteAccuracy, in points.
	Lift float64
}

// decisions hands each negotiation's decide (or abort) event to the one waiting for it.
type decisions struct {
	mu      sync.Mutex
	waiting map[string]chan negotiation.Event
}

// expect must be called before the negotiation is opened, so that its end cannot be missed.
func (d *decisions) expect(id string) <-chan negotiation.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan negotiation.Event, 1)
	d.waiting[id] = ch
	return ch
}

func (d *decisions) deliver(ev negotiation.Event) {
	if ev.Kind != "decide" && ev.Kind != "abort" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch := d.waiting[ev.NegotiationID]; ch != nil {
		delete(d.waiting, ev.NegotiationID)
		ch <- ev
	}
}

// harness runs part 2.
func (s *session) harness(ctx context.Context) (*HarnessResult, error) {
	moderator, err := s.join(ctx, "moderator", "opens each review and reads its decision")
	if err != nil {
		return nil, err
	}
	dec := &decisions{waiting: map[string]chan negotiation.Event{}}
	ml, err := listen(ctx, moderator, dec.deliver)
	if err != nil {
		return nil, err
	}
	defer ml.stop()

	// The reviewers serve their debate turns; Serve confirms the negotiation events they
	// receive as participants, which they do not need.
	var reviewers []string
	roleOf := map[string]string{}
	sctx, stopServing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopServing()
		wg.Wait()
	}()
	for _, role := range Roles {
		a, err := s.join(ctx, role, reviewerDescription(role))
		if err != nil {
			return nil, err
		}
		reviewers, roleOf[a.ID()] = append(reviewers, a.ID()), role
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Serve(sctx, turnHandler(role), nil); err != nil && sctx.Err() == nil {
				s.p.say(a.ID(), "stopped serving: %v", err)
			}
		}()
	}

	mc := negotiation.New(moderator)
	res := &HarnessResult{}
	for i, f := range Fixtures {
		row := Row{Fixture: f}
		var debateErr, voteErr error
		var both sync.WaitGroup
		both.Add(2)
		go func() {
			defer both.Done()
			row.Debate, debateErr = s.review(ctx, mc, dec, f, "debate", DebateRounds, reviewers, roleOf)
		}()
		go func() {
			defer both.Done()
			row.Vote, voteErr = s.review(ctx, mc, dec, f, "vote", 0, reviewers, roleOf)
		}()
		both.Wait()
		if debateErr != nil {
			return res, debateErr
		}
		if voteErr != nil {
			return res, voteErr
		}
		res.Rows = append(res.Rows, row)
		if row.Debate.Correct {
			res.DebateCorrect++
		}
		if row.Vote.Correct {
			res.VoteCorrect++
		}
		s.printRow(i, row)
	}
	n := float64(len(res.Rows))
	res.DebateAccuracy = 100 * float64(res.DebateCorrect) / n
	res.VoteAccuracy = 100 * float64(res.VoteCorrect) / n
	res.Lift = res.DebateAccuracy - res.VoteAccuracy
	s.printTable(res)
	return res, nil
}

// reviewerDescription is what each reviewer registers as.
func reviewerDescription(role string) string {
	switch role {
	case RoleAdvocate:
		return "reviewer arguing for a design"
	case RoleSkeptic:
		return "reviewer arguing against a design"
	}
	return "reviewer weighing a design"
}

// turnHandler answers a reviewer's debate turns with Respond.
func turnHandler(role string) sdk.TaskHandler {
	return func(_ context.Context, run *sdk.TaskRun) ([]byte, error) {
		p, ok, err := negotiation.Turn(run.Task())
		if !ok {
			return nil, fmt.Errorf("task %s is not a debate turn (content type %q)", run.Task().ID, run.Task().ContentType)
		}
		if err != nil {
			return nil, fmt.Errorf("task %s: debate turn params: %w", run.Task().ID, err)
		}
		return []byte(Respond(role, p)), nil
	}
}

// review opens one fixture's negotiation in one mode (rounds 0: the parallel vote) and
// waits for its decision.
func (s *session) review(ctx context.Context, mc *negotiation.Client, dec *decisions, f Fixture, mode string, rounds int,
	reviewers []string, roleOf map[string]string) (Outcome, error) {
	id := "review-" + f.Name + "-" + mode + "-" + s.suffix
	out := Outcome{NegotiationID: id}
	ended := dec.expect(id)
	if err := mc.Open(ctx, negotiation.Options{ID: id, Topic: f.Design, Participants: reviewers, Debate: true, Rounds: rounds}); err != nil {
		return out, fmt.Errorf("open %s: %w", id, err)
	}
	ev, err := waitEvent(ctx, ended, "negotiation "+id, s.opts.Wait)
	if err != nil {
		return out, err
	}
	if ev.Kind != "decide" {
		return out, fmt.Errorf("negotiation %s ended with %s: %s", id, ev.Kind, ev.Reason)
	}
	r, err := ev.DebateResult()
	if err != nil {
		return out, fmt.Errorf("decision of %s: %w", id, err)
	}
	out.Mode, out.RoundsRun, out.StopReason, out.Majority = r.Mode, r.RoundsRun, r.StopReason, r.Majority
	out.Verdict = VerdictOf(r.Majority)
	out.Correct = out.Verdict == f.Expected
	out.Reasons = map[string][]string{}
	labels, positions := map[string]string{}, map[string]string{}
	for _, v := range r.Verdicts {
		labels[roleOf[v.Agent]] = v.Label
	}
	for _, t := range r.Transcript {
		role := roleOf[t.Agent]
		out.Transcript = append(out.Transcript, debate.Turn{Round: t.Round, Agent: role, Text: t.Text})
		if t.Round == 1 && rounds > 0 {
			positions[role] = PositionOf(t.Text)
		}
		if t.Round == r.RoundsRun {
			out.Reasons[role] = MindChanges(t.Text)
		}
	}
	for _, role := range Roles {
		out.Labels = append(out.Labels, orDash(labels[role]))
		if rounds > 0 {
			out.Positions = append(out.Positions, orDash(positions[role]))
		}
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// mark is ✓ for a correct verdict, ✗ otherwise.
func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// printRow prints one fixture's outcome: the design, both modes' votes and majorities, and
// in the debate who changed their mind and why.
func (s *session) printRow(i int, row Row) {
	f := row.Fixture
	s.p.line("")
	s.p.line("fixture %d/%d %s (known %s): %s", i+1, len(Fixtures), f.Name, f.Expected, f.Design)
	var parts []string
	for j, role := range Roles {
		parts = append(parts, fmt.Sprintf("%s %s", role, row.Vote.Labels[j]))
	}
	s.p.line("  vote    %s → majority %s = %s %s", strings.Join(parts, ", "), orDash(row.Vote.Majority), row.Vote.Verdict, mark(row.Vote.Correct))
	parts = parts[:0]
	for j, role := range Roles {
		if row.Debate.Positions[j] == row.Debate.Labels[j] {
			parts = append(parts, fmt.Sprintf("%s %s", role, row.Debate.Labels[j]))
		} else {
			parts = append(parts, fmt.Sprintf("%s %s→%s", role, row.Debate.Positions[j], row.Debate.Labels[j]))
		}
	}
	s.p.line("  debate  %s → majority %s = %s %s", strings.Join(parts, ", "), orDash(row.Debate.Majority), row.Debate.Verdict, mark(row.Debate.Correct))
	for j, role := range Roles {
		if row.Debate.Positions[j] == row.Debate.Labels[j] {
			continue
		}
		for _, l := range row.Debate.Reasons[role] {
			s.p.line("          %s changed its mind: %s", role, l)
		}
	}
	if s.opts.Transcripts {
		s.p.line("  transcript of %s (%d rounds, stop %s):", row.Debate.NegotiationID, row.Debate.RoundsRun, row.Debate.StopReason)
		for _, t := range row.Debate.Transcript {
			s.p.line("    round %d, %s:", t.Round, t.Agent)
			for l := range strings.SplitSeq(t.Text, "\n") {
				s.p.line("      %s", l)
			}
		}
	}
}

// printTable prints the harness's table, the accuracies and the lift against ADR-011's bar.
func (s *session) printTable(res *HarnessResult) {
	s.p.line("")
	s.p.line("%s%s%s%s", pad("fixture", 10), pad("known", 8), pad("debate", 12), "vote")
	for _, r := range res.Rows {
		s.p.line("%s%s%s%s", pad(r.Fixture.Name, 10), pad(r.Fixture.Expected, 8),
			pad(r.Debate.Verdict+" "+mark(r.Debate.Correct), 12), r.Vote.Verdict+" "+mark(r.Vote.Correct))
	}
	n := len(res.Rows)
	s.p.line("%s%s%s%s", pad("accuracy", 18), pad(fmt.Sprintf("%d/%d %.1f%%", res.DebateCorrect, n, res.DebateAccuracy), 12),
		fmt.Sprintf("%d/%d %.1f%%", res.VoteCorrect, n, res.VoteAccuracy), "")
	keep := "keep debate mode"
	if res.Lift < LiftThreshold {
		keep = "defer debate mode (Option A)"
	}
	s.p.line("lift of debate over the parallel vote: %+.1f points (ADR-011 defers debate mode below %.0f): %s", res.Lift, LiftThreshold, keep)
}

// pad pads s with spaces to width columns (runes, so that ✓ and ✗ count as one).
func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(1, width-utf8.RuneCountInString(s)))
}
