package deliberation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
)

// simulate runs a fixture the way the negotiation workflow does (docs/negotiation.md, "Debate
// turns as tasks"): every round's turns see the earlier rounds, the last round's verdicts are
// parsed and aggregated by protocol/debate. rounds 0 is the parallel vote.
func simulate(t *testing.T, f Fixture, rounds int) (majority string, labels []string, transcript []debate.Turn) {
	t.Helper()
	total := max(rounds, 1)
	for r := 1; r <= total; r++ {
		final := r == total
		p := debate.TurnParams{NegotiationID: "n", Topic: f.Design, Round: r, Rounds: rounds, Final: final,
			Transcript: append([]debate.Turn(nil), transcript...), Instruction: debate.Instruction(r, rounds, final)}
		var turns []debate.Turn
		for _, role := range Roles {
			turns = append(turns, debate.Turn{Round: r, Agent: role, Text: Respond(role, p)})
		}
		transcript = append(transcript, turns...)
		if final {
			var vs []debate.Verdict
			for _, tu := range turns {
				v := debate.ParseVerdict(tu.Agent, tu.Text)
				require.False(t, v.Missing, "%s's final turn has a verdict:\n%s", tu.Agent, tu.Text)
				vs = append(vs, v)
				labels = append(labels, v.Label)
			}
			_, majority = debate.Aggregate("", vs)
		}
	}
	return majority, labels, transcript
}

// The harness's table, as the README prints it: the parallel vote gets orders (a risk only
// the skeptic sees) and webhooks (every risk handled, few strengths) wrong; the debate gets
// them right and is fooled by billing (a mitigation named but switched off). 5/6 against 4/6.
func TestHarnessTable(t *testing.T) {
	want := map[string]struct{ debate, vote string }{
		"payments": {Good, Good},
		"orders":   {Bad, Good},
		"webhooks": {Good, Bad},
		"reports":  {Bad, Bad},
		"docs":     {Good, Good},
		"billing":  {Good, Bad},
	}
	require.Len(t, Fixtures, len(want))
	debateRight, voteRight := 0, 0
	for _, f := range Fixtures {
		dm, _, _ := simulate(t, f, DebateRounds)
		vm, _, _ := simulate(t, f, 0)
		assert.Equal(t, want[f.Name].debate, VerdictOf(dm), "%s in debate", f.Name)
		assert.Equal(t, want[f.Name].vote, VerdictOf(vm), "%s in the vote", f.Name)
		if VerdictOf(dm) == f.Expected {
			debateRight++
		}
		if VerdictOf(vm) == f.Expected {
			voteRight++
		}
	}
	assert.Equal(t, 5, debateRight)
	assert.Equal(t, 4, voteRight)
}

// Minds change only on the other side's claims: on "orders" the advocate and the pragmatist
// approve alone and reject after hearing the skeptic's risk; on "webhooks" the skeptic and the
// pragmatist reject alone and approve after hearing the advocate's mitigations.
func TestMindsChangeOnDecisiveClaims(t *testing.T) {
	fixture := func(name string) Fixture {
		for _, f := range Fixtures {
			if f.Name == name {
				return f
			}
		}
		t.Fatalf("no fixture %s", name)
		return Fixture{}
	}
	_, vote, _ := simulate(t, fixture("orders"), 0)
	_, deb, tr := simulate(t, fixture("orders"), DebateRounds)
	assert.Equal(t, []string{"approve", "reject", "approve"}, vote)
	assert.Equal(t, []string{"reject", "reject", "reject"}, deb)
	assert.Equal(t, "approve", PositionOf(tr[0].Text), "the advocate's first position is the vote's")
	assert.Equal(t, []string{"Conceded: a single point of failure is not handled."}, MindChanges(tr[3].Text))
	assert.Contains(t, tr[1].Text, `Risk: a single point of failure, because of "single primary".`)

	_, vote, _ = simulate(t, fixture("webhooks"), 0)
	_, deb, tr = simulate(t, fixture("webhooks"), DebateRounds)
	assert.Equal(t, []string{"approve", "reject", "reject"}, vote)
	assert.Equal(t, []string{"approve", "approve", "approve"}, deb)
	assert.Len(t, MindChanges(tr[4].Text), 3, "the skeptic withdraws each of its three risks:\n%s", tr[4].Text)
	assert.Equal(t, []string{"Decisive: every risk raised is handled."}, MindChanges(tr[5].Text))
}

// Respond is deterministic, ends a final turn with a FINAL_VERDICT and a non-final one with a
// position, and an unknown role still answers.
func TestRespond(t *testing.T) {
	p := debate.TurnParams{Topic: Fixtures[0].Design, Round: 1, Rounds: 2}
	assert.Equal(t, Respond(RoleSkeptic, p), Respond(RoleSkeptic, p))
	assert.Equal(t, "reject", PositionOf(Respond(RoleSkeptic, p)))
	assert.NotContains(t, Respond(RoleSkeptic, p), debate.VerdictMarker)
	p.Final = true
	v := debate.ParseVerdict("a", Respond(RoleAdvocate, p))
	assert.Equal(t, "approve", v.Label)
	assert.InDelta(t, 8, v.Score, 1e-9)
	assert.True(t, strings.HasPrefix(Respond("nobody", p), `No reviewer role "nobody".`))
	assert.Equal(t, NoVerdict, VerdictOf(""))
}
