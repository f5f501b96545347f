package room_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/sdk/room"
)

func proposal(id string, critics ...string) *negotiationroompb.NegotiationProposal {
	if len(critics) == 0 {
		critics = []string{"critic-1", "critic-2"}
	}
	return &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: id, ProducerId: "producer",
		Artifact: []byte("package x"), ArtifactContentType: "text/x-go", RequestedCritics: critics,
		NegotiationRoomId: "room-1",
	}
}

func vote(id, critic string, score, confidence float64, passed bool) *negotiationroompb.NegotiationVote {
	return &negotiationroompb.NegotiationVote{
		ArtifactId: id, CriticId: critic, Score: score, Confidence: confidence, Passed: passed,
		Strengths: []string{"s"}, Weaknesses: []string{"w"}, Recommendations: []string{"r"},
	}
}

func decision(id string, outcome negotiationroompb.DecisionOutcome) *negotiationroompb.NegotiationDecision {
	return &negotiationroompb.NegotiationDecision{ArtifactId: id, Outcome: outcome, PolicyVersion: "policy-1", Reason: "test"}
}

func newClient() (*room.Client, context.Context) {
	return room.NewWithStore(room.NewMemoryStore()), context.Background()
}

func TestSubmitProposalStoresACopyWithDefaults(t *testing.T) {
	c, ctx := newClient()
	p := proposal("a1")
	p.NegotiationRoomId = ""
	before := time.Now()
	id, err := c.SubmitProposal(ctx, p)
	require.NoError(t, err)
	require.Equal(t, "a1", id)
	require.Nil(t, p.GetCreatedAt(), "the caller's message is not modified")

	got, err := c.GetProposal(ctx, "a1")
	require.NoError(t, err)
	require.Equal(t, room.DefaultRoomID, got.GetNegotiationRoomId())
	require.False(t, got.GetCreatedAt().AsTime().Before(before.Add(-time.Second)))
	got.ArtifactId = "mutated"
	again, _ := c.GetProposal(ctx, "a1")
	require.Equal(t, "a1", again.GetArtifactId(), "returned messages are copies")

	// An explicit created_at is kept.
	p2 := proposal("a2")
	at := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	p2.CreatedAt = at
	_, err = c.SubmitProposal(ctx, p2)
	require.NoError(t, err)
	got, _ = c.GetProposal(ctx, "a2")
	require.True(t, proto.Equal(at, got.GetCreatedAt()))
}

func TestSubmitProposalRefusals(t *testing.T) {
	c, ctx := newClient()
	mod := func(f func(p *negotiationroompb.NegotiationProposal)) *negotiationroompb.NegotiationProposal {
		p := proposal("bad")
		f(p)
		return p
	}
	cases := []struct {
		name string
		p    *negotiationroompb.NegotiationProposal
		kind error
	}{
		{"nil", nil, voting.ErrMissingField},
		{"unspecified type", mod(func(p *negotiationroompb.NegotiationProposal) { p.ArtifactType = 0 }), voting.ErrInvalidArtifactType},
		{"empty id", mod(func(p *negotiationroompb.NegotiationProposal) { p.ArtifactId = "" }), voting.ErrMissingField},
		{"id with space", mod(func(p *negotiationroompb.NegotiationProposal) { p.ArtifactId = "a b" }), voting.ErrInvalidArtifactID},
		{"no producer", mod(func(p *negotiationroompb.NegotiationProposal) { p.ProducerId = " " }), voting.ErrMissingField},
		{"bad content type", mod(func(p *negotiationroompb.NegotiationProposal) { p.ArtifactContentType = "text" }), voting.ErrInvalidContentType},
		{"no critics", mod(func(p *negotiationroompb.NegotiationProposal) { p.RequestedCritics = nil }), voting.ErrNoCritics},
		{"blank critic", mod(func(p *negotiationroompb.NegotiationProposal) { p.RequestedCritics = []string{"c", ""} }), voting.ErrMissingField},
		{"duplicate critic", mod(func(p *negotiationroompb.NegotiationProposal) { p.RequestedCritics = []string{"c", "c"} }), voting.ErrDuplicateCritic},
		{"producer is critic", mod(func(p *negotiationroompb.NegotiationProposal) { p.RequestedCritics = []string{"producer"} }), voting.ErrProducerIsCritic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SubmitProposal(ctx, tc.p)
			require.ErrorIs(t, err, tc.kind)
			require.ErrorIs(t, err, voting.ErrInvalidArgument)
			var ve *voting.ValidationError
			require.ErrorAs(t, err, &ve)
		})
	}
	list, err := c.ListProposals(ctx, "")
	require.NoError(t, err)
	require.Empty(t, list, "refused proposals are not stored")
}

func TestArtifactIDIsUniqueExceptAfterRevisionRequested(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)

	// Under review.
	_, err = c.SubmitProposal(ctx, proposal("a1"))
	require.ErrorIs(t, err, room.ErrAlreadyExists)
	require.ErrorContains(t, err, "still under review")

	// Awaiting a human.
	require.NoError(t, c.SubmitVote(ctx, vote("a1", "critic-1", 5, 0.9, false)))
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL)))
	_, err = c.SubmitProposal(ctx, proposal("a1"))
	require.ErrorIs(t, err, room.ErrAlreadyExists)
	require.ErrorContains(t, err, "awaiting a human")

	// The human asks for a revision: the same artifact_id becomes version 2, with no votes and
	// no decision.
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_REVISION_REQUESTED)))
	v2 := proposal("a1")
	v2.Artifact = []byte("package x // v2")
	_, err = c.SubmitProposal(ctx, v2)
	require.NoError(t, err)
	got, _ := c.GetProposal(ctx, "a1")
	require.Equal(t, "package x // v2", string(got.GetArtifact()))
	votes, _ := c.GetVotes(ctx, "a1")
	require.Empty(t, votes)
	d, _ := c.GetDecision(ctx, "a1")
	require.Nil(t, d)
	require.NoError(t, c.SubmitVote(ctx, vote("a1", "critic-1", 9, 0.9, true)), "critic-1 votes again on version 2")
	list, _ := c.ListProposals(ctx, "")
	require.Len(t, list, 1, "a revision replaces the proposal")

	// Approved: final.
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_APPROVED)))
	_, err = c.SubmitProposal(ctx, proposal("a1"))
	require.ErrorIs(t, err, room.ErrAlreadyExists)
	require.ErrorContains(t, err, "approved at version 2")
}

func TestSubmitVoteAndGetVotes(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)

	votes, err := c.GetVotes(ctx, "a1")
	require.NoError(t, err)
	require.Empty(t, votes)

	v1 := vote("a1", "critic-1", 8.5, 0.9, true)
	require.NoError(t, c.SubmitVote(ctx, v1))
	require.Nil(t, v1.GetVotedAt(), "the caller's message is not modified")
	at := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	v2 := vote("a1", "critic-2", 6.5, 0.6, false)
	v2.VotedAt = at
	v2.NegotiationRoomId = "room-1"
	require.NoError(t, c.SubmitVote(ctx, v2))

	votes, err = c.GetVotes(ctx, "a1")
	require.NoError(t, err)
	require.Len(t, votes, 2)
	require.Equal(t, "critic-1", votes[0].GetCriticId(), "arrival order")
	require.Equal(t, "room-1", votes[0].GetNegotiationRoomId(), "an empty room becomes the proposal's")
	require.NotNil(t, votes[0].GetVotedAt())
	require.True(t, proto.Equal(at, votes[1].GetVotedAt()), "an explicit voted_at is kept")
	votes[0].Score = 0
	again, _ := c.GetVotes(ctx, "a1")
	require.InDelta(t, 8.5, again[0].GetScore(), 0, "returned votes are copies")

	unknown, err := c.GetVotes(ctx, "nope")
	require.NoError(t, err)
	require.NotNil(t, unknown)
	require.Empty(t, unknown)
}

func TestSubmitVoteRefusals(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)
	_, err = c.SubmitProposal(ctx, proposal("a2"))
	require.NoError(t, err)
	require.NoError(t, c.SubmitVote(ctx, vote("a1", "critic-1", 8, 0.9, true)))
	require.NoError(t, c.SubmitVote(ctx, vote("a2", "critic-1", 8, 0.9, true)))
	require.NoError(t, c.StoreDecision(ctx, decision("a2", negotiationroompb.DecisionOutcome_APPROVED)))

	wrongRoom := vote("a1", "critic-2", 8, 0.9, true)
	wrongRoom.NegotiationRoomId = "room-2"
	cases := []struct {
		name  string
		v     *negotiationroompb.NegotiationVote
		kinds []error
	}{
		{"nil", nil, []error{voting.ErrMissingField, voting.ErrInvalidArgument}},
		{"no artifact", vote("", "critic-1", 8, 0.9, true), []error{voting.ErrMissingField, voting.ErrInvalidArgument}},
		{"no critic", vote("a1", "", 8, 0.9, true), []error{voting.ErrMissingField, voting.ErrInvalidArgument}},
		{"score above 10", vote("a1", "critic-2", 10.5, 0.9, true), []error{voting.ErrOutOfRange, voting.ErrInvalidArgument}},
		{"negative score", vote("a1", "critic-2", -1, 0.9, true), []error{voting.ErrOutOfRange}},
		{"NaN score", vote("a1", "critic-2", math.NaN(), 0.9, true), []error{voting.ErrOutOfRange}},
		{"confidence above 1", vote("a1", "critic-2", 8, 1.5, true), []error{voting.ErrOutOfRange}},
		{"infinite confidence", vote("a1", "critic-2", 8, math.Inf(1), true), []error{voting.ErrOutOfRange}},
		{"malformed beats unknown artifact", vote("nope", "critic-2", 11, 0.9, true), []error{voting.ErrOutOfRange}},
		{"unknown artifact", vote("nope", "critic-1", 8, 0.9, true), []error{room.ErrNotFound}},
		{"wrong room", wrongRoom, []error{room.ErrNotFound}},
		{"critic not requested", vote("a1", "critic-9", 8, 0.9, true), []error{voting.ErrNotRequested, voting.ErrFailedPrecondition}},
		{"second vote", vote("a1", "critic-1", 7, 0.9, true), []error{voting.ErrAlreadyVoted, voting.ErrFailedPrecondition}},
		{"decided", vote("a2", "critic-2", 8, 0.9, true), []error{voting.ErrDecided, voting.ErrFailedPrecondition}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.SubmitVote(ctx, tc.v)
			require.Error(t, err)
			for _, k := range tc.kinds {
				require.ErrorIs(t, err, k)
			}
		})
	}
	votes, _ := c.GetVotes(ctx, "a1")
	require.Len(t, votes, 1, "refused votes are not stored")
}

func TestStoreAndGetDecision(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)

	d, err := c.GetDecision(ctx, "a1")
	require.NoError(t, err)
	require.Nil(t, d, "no decision yet")
	d, err = c.GetDecision(ctx, "nope")
	require.NoError(t, err)
	require.Nil(t, d, "unknown artifact")

	require.NoError(t, c.SubmitVote(ctx, vote("a1", "critic-1", 8.5, 0.9, true)))
	votes, _ := c.GetVotes(ctx, "a1")
	in := decision("a1", negotiationroompb.DecisionOutcome_APPROVED)
	in.Votes = votes
	in.AggregatedScore = room.Aggregate(votes, voting.StrategyConfidenceWeighted)
	require.NoError(t, c.StoreDecision(ctx, in))
	require.Nil(t, in.GetDecidedAt(), "the caller's message is not modified")

	got, err := c.GetDecision(ctx, "a1")
	require.NoError(t, err)
	require.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, got.GetOutcome())
	require.Equal(t, "room-1", got.GetNegotiationRoomId())
	require.NotNil(t, got.GetDecidedAt())
	require.Len(t, got.GetVotes(), 1)
	require.InDelta(t, 8.5, got.GetAggregatedScore().GetWeightedMean(), 1e-12)

	// An explicit decided_at is kept.
	_, err = c.SubmitProposal(ctx, proposal("a2"))
	require.NoError(t, err)
	at := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	d2 := decision("a2", negotiationroompb.DecisionOutcome_REVISION_REQUESTED)
	d2.DecidedAt = at
	require.NoError(t, c.StoreDecision(ctx, d2))
	got, _ = c.GetDecision(ctx, "a2")
	require.True(t, proto.Equal(at, got.GetDecidedAt()))
}

func TestStoreDecisionRefusals(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)
	_, err = c.SubmitProposal(ctx, proposal("a2"))
	require.NoError(t, err)
	require.NoError(t, c.StoreDecision(ctx, decision("a2", negotiationroompb.DecisionOutcome_REVISION_REQUESTED)))
	wrongRoom := decision("a1", negotiationroompb.DecisionOutcome_APPROVED)
	wrongRoom.NegotiationRoomId = "room-2"
	cases := []struct {
		name  string
		d     *negotiationroompb.NegotiationDecision
		kinds []error
	}{
		{"nil", nil, []error{voting.ErrMissingField, voting.ErrInvalidArgument}},
		{"no artifact", decision("", negotiationroompb.DecisionOutcome_APPROVED), []error{voting.ErrMissingField}},
		{"unspecified outcome", decision("a1", negotiationroompb.DecisionOutcome_DECISION_OUTCOME_UNSPECIFIED), []error{room.ErrInvalidOutcome, voting.ErrInvalidArgument}},
		{"unknown outcome", decision("a1", 42), []error{room.ErrInvalidOutcome}},
		{"unknown artifact", decision("nope", negotiationroompb.DecisionOutcome_APPROVED), []error{room.ErrNotFound}},
		{"wrong room", wrongRoom, []error{room.ErrNotFound}},
		{"already decided", decision("a2", negotiationroompb.DecisionOutcome_APPROVED), []error{voting.ErrDecided, voting.ErrFailedPrecondition}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.StoreDecision(ctx, tc.d)
			require.Error(t, err)
			for _, k := range tc.kinds {
				require.ErrorIs(t, err, k)
			}
		})
	}
	d, _ := c.GetDecision(ctx, "a1")
	require.Nil(t, d)
	d, _ = c.GetDecision(ctx, "a2")
	require.Equal(t, negotiationroompb.DecisionOutcome_REVISION_REQUESTED, d.GetOutcome(), "a final decision is not replaced")
}

func TestEscalatedDecisionCanBeReplaced(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL)))
	require.ErrorIs(t, c.SubmitVote(ctx, vote("a1", "critic-1", 8, 0.9, true)), voting.ErrDecided)
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_APPROVED)), "the human's answer")
	d, _ := c.GetDecision(ctx, "a1")
	require.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	require.ErrorIs(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_REVISION_REQUESTED)), voting.ErrDecided)
}

func TestGetAndListProposals(t *testing.T) {
	c, ctx := newClient()
	p, err := c.GetProposal(ctx, "nope")
	require.NoError(t, err)
	require.Nil(t, p)
	list, err := c.ListProposals(ctx, "")
	require.NoError(t, err)
	require.NotNil(t, list)
	require.Empty(t, list)

	for i, r := range []string{"room-b", "room-a", "room-b", ""} {
		p := proposal(fmt.Sprintf("a%d", i))
		p.NegotiationRoomId = r
		_, err := c.SubmitProposal(ctx, p)
		require.NoError(t, err)
	}
	ids := func(ps []*negotiationroompb.NegotiationProposal) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.GetArtifactId())
		}
		return out
	}
	all, err := c.ListProposals(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"a0", "a1", "a2", "a3"}, ids(all), "submission order")
	b, _ := c.ListProposals(ctx, "room-b")
	require.Equal(t, []string{"a0", "a2"}, ids(b))
	def, _ := c.ListProposals(ctx, room.DefaultRoomID)
	require.Equal(t, []string{"a3"}, ids(def))
	none, _ := c.ListProposals(ctx, "room-z")
	require.Empty(t, none)
	got, _ := c.GetProposal(ctx, "a1")
	require.Equal(t, "room-a", got.GetNegotiationRoomId())
}

func TestWaitForDecisionWakesUp(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)

	const waiters = 3
	var wg sync.WaitGroup
	results := make(chan *negotiationroompb.NegotiationDecision, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.WaitForDecision(ctx, "a1", 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			results <- d
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them block
	start := time.Now()
	require.NoError(t, c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_APPROVED)))
	wg.Wait()
	close(results)
	require.Less(t, time.Since(start), 2*time.Second, "woken by StoreDecision, not by the timeout")
	n := 0
	for d := range results {
		require.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
		n++
	}
	require.Equal(t, waiters, n)

	// Already decided: returns at once.
	d, err := c.WaitForDecision(ctx, "a1", time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
}

func TestWaitForDecisionBeforeTheProposalExists(t *testing.T) {
	c, ctx := newClient()
	done := make(chan error, 1)
	go func() {
		_, err := c.WaitForDecision(ctx, "later", 10*time.Second)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_, err := c.SubmitProposal(ctx, proposal("later"))
	require.NoError(t, err)
	require.NoError(t, c.StoreDecision(ctx, decision("later", negotiationroompb.DecisionOutcome_APPROVED)))
	require.NoError(t, <-done)
}

func TestWaitForDecisionTimeoutAndCancel(t *testing.T) {
	c, ctx := newClient()
	_, err := c.SubmitProposal(ctx, proposal("a1"))
	require.NoError(t, err)
	// A decision on another artifact does not satisfy the wait.
	_, err = c.SubmitProposal(ctx, proposal("a2"))
	require.NoError(t, err)
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = c.StoreDecision(ctx, decision("a2", negotiationroompb.DecisionOutcome_APPROVED))
	}()

	start := time.Now()
	d, err := c.WaitForDecision(ctx, "a1", 100*time.Millisecond)
	require.Nil(t, d)
	require.ErrorIs(t, err, room.ErrTimeout)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)

	cctx, cancel := context.WithCancel(ctx)
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	_, err = c.WaitForDecision(cctx, "a1", time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, room.ErrTimeout))
}

func TestDefaultStoreIsSharedAndReset(t *testing.T) {
	room.ResetDefaultStore()
	t.Cleanup(room.ResetDefaultStore)
	ctx := context.Background()
	producer, critic := room.New(), room.New()
	require.Same(t, room.DefaultStore(), producer.Store())
	require.Same(t, producer.Store(), room.NewWithStore(nil).Store(), "a nil store means the default")

	_, err := producer.SubmitProposal(ctx, proposal("shared"))
	require.NoError(t, err)
	require.NoError(t, critic.SubmitVote(ctx, vote("shared", "critic-1", 8, 0.9, true)))
	votes, _ := producer.GetVotes(ctx, "shared")
	require.Len(t, votes, 1, "clients made with New share the default store")

	isolated := room.NewWithStore(room.NewMemoryStore())
	p, _ := isolated.GetProposal(ctx, "shared")
	require.Nil(t, p, "a NewMemoryStore is isolated")

	old := room.DefaultStore()
	room.ResetDefaultStore()
	require.NotSame(t, old, room.DefaultStore())
	p, _ = room.New().GetProposal(ctx, "shared")
	require.Nil(t, p, "after a reset New starts from an empty store")
	p, _ = producer.GetProposal(ctx, "shared")
	require.NotNil(t, p, "clients made before the reset keep their store")
}

func TestConcurrentUse(t *testing.T) {
	c, ctx := newClient()
	critics := make([]string, 20)
	for i := range critics {
		critics[i] = fmt.Sprintf("critic-%d", i)
	}
	_, err := c.SubmitProposal(ctx, proposal("busy", critics...))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, critic := range critics {
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Each critic tries twice: exactly one vote each is stored.
			_ = c.SubmitVote(ctx, vote("busy", critic, 7, 0.8, true))
			_ = c.SubmitVote(ctx, vote("busy", critic, 7, 0.8, true))
		}()
		go func() {
			defer wg.Done()
			_, _ = c.GetVotes(ctx, "busy")
			_, _ = c.ListProposals(ctx, "")
		}()
	}
	wg.Wait()
	votes, _ := c.GetVotes(ctx, "busy")
	require.Len(t, votes, len(critics))
}

func TestAggregateReexportsVoting(t *testing.T) {
	votes := []*negotiationroompb.NegotiationVote{vote("a", "c1", 8.5, 0.9, true), vote("a", "c2", 6.5, 0.6, false)}
	for _, s := range voting.Strategies() {
		require.True(t, proto.Equal(voting.Aggregate(s, votes), room.Aggregate(votes, s)), s)
	}
	require.InDelta(t, 7.7, room.Aggregate(votes, "").GetWeightedMean(), 1e-12, "empty strategy is confidence_weighted")
}
