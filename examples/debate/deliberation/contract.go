package deliberation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// ContractSchema is the JSON Schema every draft of the contract must satisfy (§17.3: invalid
// drafts are rejected without consuming a round).
const ContractSchema = `{
  "type": "object",
  "required": ["api", "version", "price_per_1k_calls", "rate_limit_rps", "sla"],
  "additionalProperties": false,
  "properties": {
    "api": {"type": "string", "minLength": 1},
    "version": {"type": "string", "pattern": "^v[0-9]+$"},
    "price_per_1k_calls": {"type": "number", "minimum": 0},
    "rate_limit_rps": {"type": "integer", "minimum": 1, "maximum": 10000},
    "sla": {"enum": ["99.0", "99.9", "99.95"]},
    "regions": {"type": "array", "items": {"enum": ["eu", "us", "apac"]}, "minItems": 1, "uniqueItems": true}
  }
}`

// The contract's drafts, in the order they are sent.
var (
	// DraftInvalid breaks the schema three ways (version, price, sla): it is refused.
	DraftInvalid = []byte(`{"api":"orders","version":"2","price_per_1k_calls":-1,"rate_limit_rps":200,"sla":"100"}`)
	// DraftProposal is the buyer's proposal, version 1.
	DraftProposal = []byte(`{"api":"orders","version":"v2","price_per_1k_calls":0.4,"rate_limit_rps":200,"sla":"99.9","regions":["eu","us"]}`)
	// DraftCounter is the seller's counter, version 2: only the price changes.
	DraftCounter = []byte(`{"api":"orders","version":"v2","price_per_1k_calls":0.55,"rate_limit_rps":200,"sla":"99.9","regions":["eu","us"]}`)
)

// The evaluations: the seller's of the proposal (below the threshold) and the buyer's of the
// counter (above it).
const (
	sellerConfidence = 0.35
	buyerConfidence  = 0.95
)

// sellerPreferences are the seller's advisory policy values (§17.2): fewer rounds and a
// higher bar than LOW's defaults, which the effective policy takes as the most conservative.
var sellerPreferences = &policypb.AgentPreferences{MaxRounds: 3, ScoreThreshold: 0.75}

// ContractResult is what the contract negotiation showed.
type ContractResult struct {
	// NegotiationID is the negotiation's id.
	NegotiationID string
	// Buyer and Seller are the participants' agent ids.
	Buyer, Seller string
	// Refusal is the invalid draft's refusal: its gRPC code and message (the reasons).
	RefusalCode codes.Code
	Refusal     string
	// Effective is the effective policy, read after Open.
	Effective *policypb.EffectivePolicy
	// Kinds are the kinds of the events the buyer received, in order.
	Kinds []string
	// DecidedBy is the decide event's "by" (consensus when the participants agreed).
	DecidedBy string
	// Decision is the DecisionReport artifact.
	Decision *policypb.DecisionReport
	// Result is the decided contract.
	Result []byte
}

// contract runs part 1. It is one function on purpose: an example reads top to bottom as the story it tells.
func (s *session) contract(ctx context.Context) (*ContractResult, error) {
	buyer, err := s.join(ctx, "buyer", "opens the contract negotiation and proposes")
	if err != nil {
		return nil, err
	}
	seller, err := s.join(ctx, "seller", "evaluates the proposal and counters")
	if err != nil {
		return nil, err
	}
	res := &ContractResult{NegotiationID: "contract-" + s.suffix, Buyer: buyer.ID(), Seller: seller.ID()}
	id := res.NegotiationID

	// The buyer, the opener, prints every event as it arrives; the seller's copy of each is
	// only confirmed.
	var mu sync.Mutex
	ended := make(chan negotiation.Event, 1)
	bl, err := listen(ctx, buyer, func(ev negotiation.Event) {
		if ev.NegotiationID != id {
			return
		}
		mu.Lock()
		res.Kinds = append(res.Kinds, ev.Kind)
		mu.Unlock()
		s.p.say(buyer.ID(), "event #%d %s", ev.Seq, describe(ev))
		if ev.Kind == "decide" || ev.Kind == "abort" {
			ended <- ev
		}
	})
	if err != nil {
		return res, err
	}
	defer bl.stop()
	sl, err := listen(ctx, seller, func(negotiation.Event) {})
	if err != nil {
		return res, err
	}
	defer sl.stop()

	bn, sn := negotiation.New(buyer), negotiation.New(seller)
	s.p.say(buyer.ID(), "Open %s: topic \"Orders API v2 contract\", participants %s and %s, intensity LOW, a JSON Schema, the seller's preferences %v",
		id, buyer.ID(), seller.ID(), prefString(sellerPreferences))
	if err := bn.Open(ctx, negotiation.Options{ID: id, Topic: "Orders API v2 contract", Participants: []string{buyer.ID(), seller.ID()},
		Intensity: commonpb.DebateIntensity_LOW, Schema: json.RawMessage(ContractSchema),
		Preferences: map[string]*policypb.AgentPreferences{seller.ID(): sellerPreferences}}); err != nil {
		return res, fmt.Errorf("open %s: %w", id, err)
	}
	res.Effective, err = bn.EffectivePolicy(ctx, id)
	if err != nil {
		return res, fmt.Errorf("effective policy of %s: %w", id, err)
	}
	s.printPolicy(buyer.ID(), res.Effective)

	s.p.say(buyer.ID(), "Propose %s", DraftInvalid)
	err = bn.Propose(ctx, id, "application/json", DraftInvalid)
	if err == nil {
		return res, fmt.Errorf("the draft %s breaks the schema, yet it was accepted", DraftInvalid)
	}
	res.RefusalCode, res.Refusal = status.Code(err), status.Convert(err).Message()
	s.p.say(buyer.ID(), "  refused with %s:", res.RefusalCode)
	for _, r := range reasons(res.Refusal) {
		s.p.say("", "  %s", r)
	}
	if res.RefusalCode != codes.InvalidArgument {
		return res, fmt.Errorf("the invalid draft was refused with %s, want InvalidArgument: %v", res.RefusalCode, err)
	}

	steps := []struct {
		who  string
		what string
		call func() error
	}{
		{buyer.ID(), fmt.Sprintf("Propose %s", DraftProposal), func() error { return bn.Propose(ctx, id, "application/json", DraftProposal) }},
		{seller.ID(), fmt.Sprintf("Evaluate version 1: confidence %g", sellerConfidence),
			func() error {
				return sn.Evaluate(ctx, id, sellerConfidence, "0.40 per 1k calls is below our cost at 200 rps")
			}},
		{seller.ID(), fmt.Sprintf("Counter %s", DraftCounter), func() error { return sn.Counter(ctx, id, "application/json", DraftCounter) }},
		{buyer.ID(), fmt.Sprintf("Evaluate version 2: confidence %g", buyerConfidence),
			func() error { return bn.Evaluate(ctx, id, buyerConfidence, "0.55 is within budget") }},
	}
	for _, st := range steps {
		s.p.say(st.who, "%s", st.what)
		if err := st.call(); err != nil {
			return res, fmt.Errorf("%s: %s: %w", st.who, st.what, err)
		}
	}

	ev, err := waitEvent(ctx, ended, "negotiation "+id, s.opts.Wait)
	if err != nil {
		return res, err
	}
	if ev.Kind != "decide" {
		return res, fmt.Errorf("negotiation %s ended with %s: %s", id, ev.Kind, ev.Reason)
	}
	res.DecidedBy = ev.By
	if res.Result, err = ev.Result(); err != nil {
		return res, fmt.Errorf("decide event of %s: %w", id, err)
	}
	res.Decision, err = decisionReport(ctx, buyer, id)
	if err != nil {
		return res, err
	}
	s.p.say(buyer.ID(), "decided by %s, stop reason %s, final score %.2f: %s",
		res.Decision.GetDecidedBy(), res.Decision.GetStopReason(), res.Decision.GetFinalScore(), res.Result)
	if res.DecidedBy != "consensus" || !bytes.Equal(res.Result, DraftCounter) {
		return res, fmt.Errorf("negotiation %s was decided by %q on %s, want consensus on the counter", id, res.DecidedBy, res.Result)
	}
	return res, nil
}

// decisionReport reads the negotiation's DecisionReport, the artifact decision/final (§17.4),
// through ActivityService.ListArtifacts.
func decisionReport(ctx context.Context, a *sdk.Agent, id string) (*policypb.DecisionReport, error) {
	resp, err := activitypb.NewActivityServiceClient(a.ClientConn()).ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: id})
	if err != nil {
		return nil, fmt.Errorf("artifacts of %s: %w", id, err)
	}
	for _, x := range resp.GetItems() {
		if x.GetKind() == "decision" && x.GetVersion() == "final" {
			var r policypb.DecisionReport
			if err := json.Unmarshal(x.GetContent(), &r); err != nil {
				return nil, fmt.Errorf("decision report of %s: %w", id, err)
			}
			return &r, nil
		}
	}
	return nil, fmt.Errorf("negotiation %s has no decision report among its %d artifacts", id, len(resp.GetItems()))
}

// describe is one line for an event: its kind and what it carries.
func describe(ev negotiation.Event) string {
	switch ev.Kind {
	case "open":
		return fmt.Sprintf("open     topic %q", ev.Topic)
	case "policy":
		return fmt.Sprintf("policy   %s", compact(ev.Policy))
	case "propose", "counter":
		p, _ := ev.Payload()
		return fmt.Sprintf("%-8s from %s: %s", ev.Kind, ev.From, p)
	case "evaluate":
		return fmt.Sprintf("evaluate from %s: confidence %g, %q", ev.From, ev.Score, ev.Notes)
	case "decide":
		r, _ := ev.Result()
		return fmt.Sprintf("decide   by %s: %s", ev.By, r)
	case "abort":
		return fmt.Sprintf("abort    %s", ev.Reason)
	}
	return ev.Kind
}

// compact writes JSON on one line.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// reasons splits a refusal's message into its heading and its reasons: the workflow joins
// the reasons with "; " after "(…): ".
func reasons(msg string) []string {
	head, rest := "", msg
	if i := strings.Index(msg, "): "); i >= 0 {
		head, rest = msg[:i+2], msg[i+3:]
	}
	var out []string
	if head != "" {
		out = append(out, head)
	}
	for r := range strings.SplitSeq(rest, "; ") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, "  "+r)
		}
	}
	return out
}

func prefString(p *policypb.AgentPreferences) string {
	return fmt.Sprintf("{max_rounds %d, score_threshold %g}", p.GetMaxRounds(), p.GetScoreThreshold())
}

// printPolicy prints the effective policy (§17.2) and the preferences it applied.
func (s *session) printPolicy(who string, eff *policypb.EffectivePolicy) {
	p := eff.GetPolicy()
	s.p.say(who, "effective policy: max_rounds %d, score_threshold %.2f, diff_tolerance %.2f, round timeout %d ms, "+
		"token budget %d per round / %d in total, oscillation_limit %d, hitl %s, scoring {schema valid %t, examples pass %t, llm_weight %.2f}",
		p.GetMaxRounds(), p.GetScoreThreshold(), p.GetDiffTolerance(), p.GetRoundTimeoutMs(), p.GetTokenBudgetPerRound(), p.GetTotalTokenBudget(),
		p.GetOscillationLimit(), p.GetHitl().GetMode(), p.GetScoring().GetRequireSchemaValid(), p.GetScoring().GetRequireExamplesPass(), p.GetScoring().GetLlmWeight())
	agents := make([]string, 0, len(eff.GetApplied()))
	for a := range eff.GetApplied() {
		agents = append(agents, a)
	}
	slices.Sort(agents)
	for _, a := range agents {
		s.p.say(who, "  applied preferences of %s: %s", a, prefString(eff.GetApplied()[a]))
	}
}
