package deliberation

import (
	"fmt"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// The harness's verdicts: what a fixture is known to be, and what a mode's majority says.
const (
	// Good is a design that should be approved.
	Good = "good"
	// Bad is a design that should be rejected.
	Bad = "bad"
	// NoVerdict is a mode's outcome when its majority is tied or missing.
	NoVerdict = "none"
)

// Fixture is one design of the A/B harness's benchmark, with its known verdict (ADR-011:
// "compare verdict accuracy on a benchmark of known good/bad designs").
type Fixture struct {
	// Name is the fixture's short name; it is part of its negotiation ids.
	Name string
	// Design is the text the reviewers judge (the debate's topic).
	Design string
	// Expected is Good or Bad.
	Expected string
}

// Fixtures is the benchmark. The reviewers below judge by keywords, and each fixture is there
// to show one way the two modes can differ: a risk only one reviewer sees (2), risks that are
// all handled though few strengths are listed (3), and a mitigation that is named but
// switched off, which a keyword reader takes at its word and which therefore wins the debate
// (6). The rest are plain good and bad designs both modes get right.
var Fixtures = []Fixture{
	{Name: "payments", Expected: Good, Design: "Payments API: card charges are delivered at-least-once, with an idempotency key on every write; " +
		"metrics, tracing and a runbook for the on-call engineer."},
	{Name: "orders", Expected: Bad, Design: "Order service: every write goes to a single primary database with no replica; " +
		"nightly backups, metrics and a load test at twice the peak."},
	{Name: "webhooks", Expected: Good, Design: "Webhook relay: events are delivered at-least-once with an idempotency key; each partner gets a " +
		"synchronous call behind a circuit breaker; the in-memory queue is backed by a write-ahead log; metrics per partner."},
	{Name: "reports", Expected: Bad, Design: "Report exporter: the database password sits in plaintext in the config file, and jobs wait in an in-memory queue."},
	{Name: "docs", Expected: Good, Design: "Docs site: stateless HTTP servers with autoscaling behind a CDN, canary releases, metrics and tracing."},
	{Name: "billing", Expected: Bad, Design: "Billing export: invoices wait in an in-memory queue; the write-ahead log is switched off in production to save disk."},
}

// The reviewers' roles, in the order they take part.
const (
	// RoleAdvocate argues for the design: its strengths and how its risks are handled.
	RoleAdvocate = "advocate"
	// RoleSkeptic argues against it: every risk its wording reveals.
	RoleSkeptic = "skeptic"
	// RolePragmatist weighs strengths against risks, and in a debate follows the decisive claim.
	RolePragmatist = "pragmatist"
)

// Roles are the reviewers in participant order.
var Roles = []string{RoleAdvocate, RoleSkeptic, RolePragmatist}

// The verdict labels the reviewers give (debate.ParseVerdict passes "approve").
const (
	labelApprove = "approve"
	labelReject  = "reject"
)

// concern is a risk a design's wording reveals (any trigger) and the wording that handles it
// (any mitigation).
type concern struct {
	name        string
	triggers    []string
	mitigations []string
}

// concerns are the risks the reviewers know, in the order they report them.
var concerns = []concern{
	{name: "a single point of failure", triggers: []string{"single primary", "single instance"}, mitigations: []string{"standby replica", "automatic failover"}},
	{name: "duplicate side effects", triggers: []string{"at-least-once"}, mitigations: []string{"idempotency key"}},
	{name: "data loss on restart", triggers: []string{"in-memory queue"}, mitigations: []string{"write-ahead log"}},
	{name: "cascading latency", triggers: []string{"synchronous call"}, mitigations: []string{"circuit breaker"}},
	{name: "leaked credentials", triggers: []string{"in plaintext"}, mitigations: []string{"secrets manager"}},
}

// strengths are the practices the reviewers count in a design's favour.
var strengths = []string{"metrics", "tracing", "runbook", "load test", "autoscaling", "canary", "backups"}

// The claim prefixes: each claim is one line of a turn, and these are the ones the others
// read. A debate changes a mind only through them.
const (
	claimStrength  = "Strength: "
	claimHandled   = "Handled: "
	claimRisk      = "Risk: "
	claimPosition  = "Position: "
	claimConceded  = "Conceded: "
	claimWithdrawn = "Withdrawn: "
	claimStill     = "Still unhandled: "
	claimDecisive  = "Decisive: "
	claimTally     = "Tally: "
	claimHeld      = "Held: "
)

// reading is what one design's wording shows a keyword reader.
type reading struct {
	strengths []string
	risks     []concern
	handled   []concern
}

func read(design string) reading {
	d := strings.ToLower(design)
	var r reading
	for _, s := range strengths {
		if strings.Contains(d, s) {
			r.strengths = append(r.strengths, s)
		}
	}
	for _, c := range concerns {
		if !containsAny(d, c.triggers) {
			continue
		}
		r.risks = append(r.risks, c)
		// A keyword reader cannot tell "backed by a write-ahead log" from "the write-ahead
		// log is switched off": naming the mitigation is enough. Fixture "billing" relies on it.
		if containsAny(d, c.mitigations) {
			r.handled = append(r.handled, c)
		}
	}
	return r
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// firstMitigation is the mitigation of c the design names.
func firstMitigation(design string, c concern) string {
	d := strings.ToLower(design)
	for _, m := range c.mitigations {
		if strings.Contains(d, m) {
			return m
		}
	}
	return ""
}

// firstTrigger is the wording of the design that raised c.
func firstTrigger(design string, c concern) string {
	d := strings.ToLower(design)
	for _, t := range c.triggers {
		if strings.Contains(d, t) {
			return t
		}
	}
	return ""
}

// alone is a reviewer's judgement from the design alone: round 1, and the parallel vote.
func alone(role string, r reading) string {
	ok := false
	switch role {
	case RoleAdvocate:
		ok = len(r.strengths)+len(r.handled) > 0
	case RoleSkeptic:
		ok = len(r.risks) == 0
	case RolePragmatist:
		ok = len(r.strengths) >= len(r.risks)
	}
	if ok {
		return labelApprove
	}
	return labelReject
}

// heard are the concerns the transcript's claims name: raised as risks, and claimed handled.
type heard struct {
	raised, handled []concern
}

// hear reads the claims of a transcript (every participant's, the reader's own included).
func hear(transcript []debate.Turn) heard {
	var h heard
	seen := map[string]bool{}
	for _, t := range transcript {
		for line := range strings.SplitSeq(t.Text, "\n") {
			line = strings.TrimSpace(line)
			for _, c := range concerns {
				switch {
				case strings.HasPrefix(line, claimRisk+c.name) && !seen["r"+c.name]:
					seen["r"+c.name] = true
					h.raised = append(h.raised, c)
				case strings.HasPrefix(line, claimHandled+c.name) && !seen["h"+c.name]:
					seen["h"+c.name] = true
					h.handled = append(h.handled, c)
				}
			}
		}
	}
	return h
}

// open are the raised concerns nobody claimed handled, in concern order.
func (h heard) open() []concern {
	var out []concern
	for _, c := range concerns {
		if has(h.raised, c) && !has(h.handled, c) {
			out = append(out, c)
		}
	}
	return out
}

func has(cs []concern, c concern) bool {
	for _, x := range cs {
		if x.name == c.name {
			return true
		}
	}
	return false
}

func names(cs []concern) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.name)
	}
	return strings.Join(n, "; ")
}

// Respond is the reviewer role's answer to one debate turn (or the parallel vote's one
// answer): its claims, one a line, then its position, or in the final round its FINAL_VERDICT.
// It is deterministic: the same design and transcript give the same text. With no transcript
// (round 1, or the parallel vote) a reviewer judges the design alone; with one, it changes its
// mind on the other side's decisive claim:
//
//   - the advocate concedes when a risk was raised that nobody claimed handled;
//   - the skeptic withdraws every risk the advocate claimed handled, and approves when none is left;
//   - the pragmatist rejects when a raised risk is still open and approves when all are
//     handled; when nobody raised a risk it keeps its tally of strengths against risks.
func Respond(role string, p debate.TurnParams) string {
	r := read(p.Topic)
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	later := len(p.Transcript) > 0 || p.Summary != ""
	label := alone(role, r)
	if later {
		// A later round adds only what is new (debate.Instruction asks for it): what the
		// reviewer now accepts or still disputes.
		label = reconsider(role, r, hear(p.Transcript), label, say)
	} else {
		claim(role, p.Topic, r, say)
	}
	if p.Final {
		score, confidence := 3.0, 0.8
		if label == labelApprove {
			score = 8
		}
		lines = append(lines, negotiation.FinalVerdict(label, score, confidence))
	} else {
		say("%s%s.", claimPosition, label)
	}
	return strings.Join(lines, "\n")
}

// claim states a reviewer's first claims about the design.
func claim(role, design string, r reading, say func(string, ...any)) {
	switch role {
	case RoleAdvocate:
		for _, s := range r.strengths {
			say("%s%s.", claimStrength, s)
		}
		for _, c := range r.handled {
			say("%s%s, by the %s.", claimHandled, c.name, firstMitigation(design, c))
		}
		if len(r.strengths)+len(r.handled) == 0 {
			say("Nothing in the design to argue for.")
		}
	case RoleSkeptic:
		for _, c := range r.risks {
			say("%s%s, because of %q.", claimRisk, c.name, firstTrigger(design, c))
		}
		if len(r.risks) == 0 {
			say("No risk found in the design.")
		}
	case RolePragmatist:
		say("%s%s against %s.", claimTally, count(len(r.strengths), "strength"), count(len(r.risks), "risk"))
	default:
		say("No reviewer role %q.", role)
	}
}

// count writes n and the noun, plural when n is not 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// reconsider is a later round's judgement: the reviewer's label after what it heard.
func reconsider(role string, r reading, h heard, label string, say func(string, ...any)) string {
	open := h.open()
	switch role {
	case RoleAdvocate:
		if len(open) > 0 {
			say("%s%s is not handled.", claimConceded, names(open))
			return labelReject
		}
		say("%sno risk raised is left unhandled.", claimHeld)
	case RoleSkeptic:
		var left []concern
		for _, c := range r.risks {
			if has(h.handled, c) {
				say("%s%s is handled.", claimWithdrawn, c.name)
			} else {
				left = append(left, c)
			}
		}
		if len(left) > 0 {
			say("%s%s.", claimStill, names(left))
			return labelReject
		}
		if len(r.risks) == 0 {
			say("%sno risk found in the design.", claimHeld)
		}
		return labelApprove
	case RolePragmatist:
		if len(open) > 0 {
			say("%s%s is raised and not handled.", claimDecisive, names(open))
			return labelReject
		}
		if len(h.raised) > 0 {
			say("%severy risk raised is handled.", claimDecisive)
			return labelApprove
		}
		say("%snobody raised a risk; %s against %s.", claimHeld, count(len(r.strengths), "strength"), count(len(r.risks), "risk"))
	default:
		say("No reviewer role %q.", role)
	}
	return label
}

// PositionOf reads the position a non-final turn states, "" when it states none.
func PositionOf(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), claimPosition); ok {
			return strings.TrimSuffix(v, ".")
		}
	}
	return ""
}

// MindChanges are the lines of a turn that say why its reviewer changed its mind or held it
// against the other side (conceded, withdrawn, still unhandled, decisive).
func MindChanges(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		for _, p := range []string{claimConceded, claimWithdrawn, claimStill, claimDecisive} {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return out
}

// VerdictOf maps a majority label to Good, Bad or NoVerdict.
func VerdictOf(majority string) string {
	switch majority {
	case labelApprove:
		return Good
	case labelReject:
		return Bad
	}
	return NoVerdict
}
