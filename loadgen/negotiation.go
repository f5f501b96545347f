package loadgen

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// negotiations is the Negotiations pattern: buyer and seller.
type negotiations struct {
	l             *ledger
	buyer, seller *sdk.Agent
	bc, sc        *negotiation.Client
	dir           directorypb.DirectoryServiceClient
}

func (n *negotiations) setup(ctx context.Context, r *runner) error {
	var err error
	if n.buyer, err = r.agent(ctx, "neg-buyer", nil); err != nil {
		return err
	}
	if n.seller, err = r.agent(ctx, "neg-seller", nil); err != nil {
		return err
	}
	n.bc, n.sc = negotiation.New(n.buyer), negotiation.New(n.seller)
	n.dir = directorypb.NewDirectoryServiceClient(n.buyer.ClientConn())
	// The negotiation's events arrive on both inboxes.
	r.read(ctx, n.buyer, nil, nil)
	r.read(ctx, n.seller, nil, nil)
	return nil
}

// call makes one negotiation call with its own idempotency key, repeated with it until it
// is answered.
func (n *negotiations) call(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return retry(ctx, n.l, func(ctx context.Context) error { return fn(negotiation.WithIdempotencyKey(ctx, key)) })
}

func (n *negotiations) op(ctx context.Context, id string) {
	o := n.l.start(id)
	attempts := 0
	err := n.call(ctx, id+"/open", func(ctx context.Context) error {
		attempts++
		return n.bc.Open(ctx, negotiation.Options{ID: id, Topic: "load generator contract", Participants: []string{n.buyer.ID(), n.seller.ID()},
			Intensity: commonpb.DebateIntensity_LOW, Timeout: time.Minute})
	})
	if err != nil && (attempts <= 1 || status.Code(err) != codes.AlreadyExists) {
		if ctx.Err() == nil {
			n.l.note("open_refused", 1)
			n.l.refuse(id)
		}
		return
	}
	n.l.ack(id)
	steps := []struct {
		key string
		fn  func(ctx context.Context) error
	}{
		{"propose", func(ctx context.Context) error {
			return n.bc.Propose(ctx, id, "application/json", contract(id, 120))
		}},
		{"counter", func(ctx context.Context) error {
			return n.sc.Counter(ctx, id, "application/json", contract(id, 110))
		}},
		{"evaluate", func(ctx context.Context) error { return n.bc.Evaluate(ctx, id, 0.97, "fair price") }},
	}
	for _, s := range steps {
		if err := n.call(ctx, id+"/"+s.key, s.fn); err != nil {
			if ctx.Err() == nil {
				n.l.note(s.key+"_refused", 1)
				n.l.fail(id)
			}
			return
		}
	}
	pollUntil(ctx, o, func() bool {
		e := n.entry(ctx, id)
		switch e.GetStatus() {
		case "decided":
			if len(e.GetVersions()) > 2 {
				n.l.double(id)
			}
			n.l.complete(id)
		case "aborted":
			n.l.fail(id)
		default:
			return false
		}
		return true
	})
}

// entry is the negotiation as ListNegotiations shows it, nil when it could not be read.
func (n *negotiations) entry(ctx context.Context, id string) *directorypb.NegotiationEntry {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	res, err := n.dir.ListNegotiations(actx, &directorypb.ListNegotiationsRequest{NegotiationId: id})
	if err != nil {
		return nil
	}
	for _, e := range res.GetNegotiations() {
		if e.GetNegotiationId() == id {
			return e
		}
	}
	return nil
}

// probe marks the unfinished negotiations still open as in flight.
func (n *negotiations) probe(ctx context.Context) {
	for _, id := range n.l.unfinished() {
		st := n.entry(ctx, id).GetStatus()
		n.l.setInFlight(id, st == "open" || st == "paused_for_hitl")
	}
}

// contract is a draft: a price among terms that do not change, so that a counter moving the
// price alone scores above the consensus threshold.
func contract(id string, price int) []byte {
	return []byte(`{"api":"orders","op":"` + id + `","price":` + strconv.Itoa(price) +
		`,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
}
