package room_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/sdk/room"
)

// The usage example of 003 §6.14.6: a producer submits a proposal, a critic votes, and the
// producer waits for the decision.
func Example() {
	room.ResetDefaultStore() // start from an empty default store (this example runs as a test)
	ctx := context.Background()

	client := room.New()

	proposal := &negotiationroompb.NegotiationProposal{
		ArtifactType:        negotiationroompb.ArtifactType_CODE,
		ArtifactId:          "code-123",
		ProducerId:          "agent-producer",
		Artifact:            []byte("def hello(): pass"),
		ArtifactContentType: "text/x-python",
		RequestedCritics:    []string{"critic-1", "critic-2"},
		NegotiationRoomId:   "room-1",
	}
	if _, err := client.SubmitProposal(ctx, proposal); err != nil {
		fmt.Println("submit proposal:", err)
		return
	}

	vote := &negotiationroompb.NegotiationVote{
		ArtifactId:        "code-123",
		CriticId:          "critic-1",
		Score:             8.5,
		Confidence:        0.9,
		Passed:            true,
		Strengths:         []string{"Clean structure"},
		Weaknesses:        []string{"Missing tests"},
		Recommendations:   []string{"Add unit tests"},
		NegotiationRoomId: "room-1",
	}
	if err := client.SubmitVote(ctx, vote); err != nil {
		fmt.Println("submit vote:", err)
		return
	}

	// A MemoryStore runs no coordinator, so (unlike with a SW4RM server, whose coordinator
	// workflow decides) the example stores a decision itself for WaitForDecision to return.
	// This stand-in coordinator stops waiting for critic-2 and applies the server's default
	// policy with the timeout expired, which escalates the missing vote to a human.
	go func() {
		coordinator := room.New()
		votes, _ := coordinator.GetVotes(ctx, "code-123")
		p, _ := coordinator.GetProposal(ctx, "code-123")
		policy := voting.DefaultPolicy()
		verdict := voting.Decide(policy, p.GetRequestedCritics(), votes, true)
		_ = coordinator.StoreDecision(ctx, &negotiationroompb.NegotiationDecision{
			ArtifactId: "code-123", Outcome: verdict.Outcome, Votes: votes, AggregatedScore: verdict.Aggregate,
			PolicyVersion: policy.Version, Reason: verdict.Reason, NegotiationRoomId: "room-1",
		})
	}()

	decision, err := client.WaitForDecision(ctx, "code-123", 10*time.Second)
	if err != nil {
		fmt.Println("wait for decision:", err)
		return
	}
	fmt.Println(decision.GetOutcome())
	// Output:
	// ESCALATED_TO_HITL
}

// The custom coordinator guide of 003 §6.14.4: fetch all votes for an artifact, aggregate
// them, and store the final decision for producers to retrieve.
func Example_customCoordinator() {
	room.ResetDefaultStore()
	ctx := context.Background()

	// The proposal and the votes the coordinator will find (in 003 they come from the
	// producer and the critics).
	producer := room.New()
	_, _ = producer.SubmitProposal(ctx, &negotiationroompb.NegotiationProposal{
		ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: "artifact-123", ProducerId: "agent-producer",
		Artifact: []byte("def hello(): pass"), ArtifactContentType: "text/x-python",
		RequestedCritics: []string{"critic-1", "critic-2"}, NegotiationRoomId: "room-1",
	})
	_ = producer.SubmitVote(ctx, &negotiationroompb.NegotiationVote{ArtifactId: "artifact-123", CriticId: "critic-1", Score: 8.5, Confidence: 0.9, Passed: true})
	_ = producer.SubmitVote(ctx, &negotiationroompb.NegotiationVote{ArtifactId: "artifact-123", CriticId: "critic-2", Score: 7.5, Confidence: 0.8, Passed: true})

	// The coordinator.
	client := room.New()
	votes, err := client.GetVotes(ctx, "artifact-123")
	if err != nil {
		fmt.Println("get votes:", err)
		return
	}
	aggregated := room.Aggregate(votes, voting.DefaultStrategy)

	decision := &negotiationroompb.NegotiationDecision{
		ArtifactId:        "artifact-123",
		Outcome:           negotiationroompb.DecisionOutcome_APPROVED,
		Votes:             votes,
		AggregatedScore:   aggregated,
		PolicyVersion:     "policy-1",
		Reason:            "Meets approval threshold",
		NegotiationRoomId: "room-1",
	}
	if err := client.StoreDecision(ctx, decision); err != nil {
		fmt.Println("store decision:", err)
		return
	}

	stored, _ := producer.GetDecision(ctx, "artifact-123")
	fmt.Printf("%s %s votes=%d weighted_mean=%.4f\n", stored.GetArtifactId(), stored.GetOutcome(),
		stored.GetAggregatedScore().GetVoteCount(), stored.GetAggregatedScore().GetWeightedMean())
	// Output:
	// artifact-123 APPROVED votes=2 weighted_mean=8.0294
}

// Swapping strategies (003 §6.14.5): the same two votes aggregated by each of the four
// strategies, whose result is stored in weighted_mean.
func ExampleAggregate() {
	votes := []*negotiationroompb.NegotiationVote{
		{
			ArtifactId:        "artifact-123",
			CriticId:          "critic-1",
			Score:             8.5,
			Confidence:        0.9,
			Passed:            true,
			Strengths:         []string{"Clear API"},
			Weaknesses:        []string{"Missing edge cases"},
			Recommendations:   []string{"Add retries"},
			NegotiationRoomId: "room-1",
		},
		{
			ArtifactId:        "artifact-123",
			CriticId:          "critic-2",
			Score:             6.5,
			Confidence:        0.6,
			Passed:            false,
			Strengths:         []string{"Readable code"},
			Weaknesses:        []string{"No tests"},
			Recommendations:   []string{"Add unit tests"},
			NegotiationRoomId: "room-1",
		},
	}

	strategies := []struct {
		name     string
		strategy voting.Strategy
	}{
		{"simple", voting.StrategySimpleAverage},
		{"confidence", voting.StrategyConfidenceWeighted},
		{"majority", voting.StrategyMajorityVote},
		{"borda", voting.StrategyBordaCount},
	}

	for _, s := range strategies {
		aggregated := room.Aggregate(votes, s.strategy)
		fmt.Printf("%s %.4f\n", s.name, aggregated.GetWeightedMean())
	}
	// Output:
	// simple 7.5000
	// confidence 7.7000
	// majority 5.0000
	// borda 7.8333
}
