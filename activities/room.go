package activities

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Artifact kinds a negotiation room keeps per version (activity.proto artifacts).
const (
	// ArtifactProposal is a proposal version.
	ArtifactProposal = "proposal"
	// ArtifactDecision is a final decision of a version.
	ArtifactDecision = "decision"
	// ArtifactProvisionalDecision is an escalation awaiting a human.
	ArtifactProvisionalDecision = "decision-escalated"
)

// RoomNegotiationID is the artifacts' negotiation_id of an artifact's room:
// "room/<room_id>/<artifact_id>", the coordinator's workflow ID.
func RoomNegotiationID(roomID, artifactID string) string { return "room/" + roomID + "/" + artifactID }

// ProposalInput asks PublishProposal to store and distribute a proposal.
type ProposalInput struct {
	// Proposal is the proposal.
	Proposal *negotiationroompb.NegotiationProposal
	// Version is its version.
	Version int
}

// PublishProposal stores the proposal as an artifact version and sends it to every requested
// critic through the router as a NEGOTIATION envelope (§17.5; JSON of NegotiationProposal).
// A retry does not duplicate the artifact.
func (a *Activities) PublishProposal(ctx context.Context, in ProposalInput) error {
	p := in.Proposal
	nid := RoomNegotiationID(p.GetNegotiationRoomId(), p.GetArtifactId())
	raw, err := proto.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode proposal: %w", err)
	}
	err = a.Store.Artifacts().AppendArtifact(ctx, store.Artifact{NegotiationID: nid, Kind: ArtifactProposal, Version: strconv.Itoa(in.Version),
		ContentType: "application/protobuf", Content: raw})
	if err != nil && !errors.Is(err, store.ErrDuplicateArtifact) {
		return fmt.Errorf("store proposal: %w", err)
	}
	payload, err := protojson.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode proposal: %w", err)
	}
	if err := a.fanOut(ctx, nid, payload, p.GetRequestedCritics()); err != nil {
		return fmt.Errorf("send proposal: %w", err)
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: nid, Actor: p.GetProducerId(), Type: "room.proposal", AgentID: p.GetProducerId(),
		Details: map[string]any{"artifact_id": p.GetArtifactId(), "version": in.Version, "artifact_type": p.GetArtifactType().String(), "critics": p.GetRequestedCritics()}})
	return nil
}

// DecisionInput asks PublishDecision to record and announce a decision.
type DecisionInput struct {
	// Decision is the decision.
	Decision *negotiationroompb.NegotiationDecision
	// ProducerID is told the decision.
	ProducerID string
	// Critics are told the final decision too.
	Critics []string
	// Version is the artifact version decided.
	Version int
	// Provisional marks an escalation still awaiting a human.
	Provisional bool
}

// PublishDecision stores the decision as an artifact version, audits it with its reason, and
// sends it to the producer (and, when final, to the critics) as a NEGOTIATION envelope.
func (a *Activities) PublishDecision(ctx context.Context, in DecisionInput) error {
	d := in.Decision
	nid := RoomNegotiationID(d.GetNegotiationRoomId(), d.GetArtifactId())
	kind := ArtifactDecision
	if in.Provisional {
		kind = ArtifactProvisionalDecision
	}
	raw, err := proto.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	err = a.Store.Artifacts().AppendArtifact(ctx, store.Artifact{NegotiationID: nid, Kind: kind, Version: strconv.Itoa(in.Version), ContentType: "application/protobuf", Content: raw})
	if err != nil && !errors.Is(err, store.ErrDuplicateArtifact) {
		return fmt.Errorf("store decision: %w", err)
	}
	payload, err := protojson.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	to := []string{in.ProducerID}
	if !in.Provisional {
		to = append(to, in.Critics...)
	}
	if err := a.fanOut(ctx, nid, payload, to); err != nil {
		return fmt.Errorf("send decision: %w", err)
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: nid, Actor: protocol.SchedulerID, Type: "room.decision", AgentID: in.ProducerID,
		Details: map[string]any{"artifact_id": d.GetArtifactId(), "version": in.Version, "outcome": d.GetOutcome().String(), "provisional": in.Provisional,
			"reason": d.GetReason(), "policy_version": d.GetPolicyVersion(), "weighted_mean": d.GetAggregatedScore().GetWeightedMean(), "votes": len(d.GetVotes())}})
	return nil
}

// fanOut sends payload to every agent as a NEGOTIATION envelope of the room's negotiation,
// all admitted in one write (Router.NotifyAll).
func (a *Activities) fanOut(ctx context.Context, negotiationID string, payload []byte, agents []string) error {
	notices := make([]router.Announcement, len(agents))
	for i, agent := range agents {
		notices[i] = router.Announcement{AgentID: agent, Envelope: &commonpb.Envelope{
			MessageId: uuid.NewString(), CorrelationId: negotiationID, MessageType: commonpb.MessageType_NEGOTIATION,
			ContentType: "application/json", ContentLength: uint64(len(payload)), Payload: payload,
		}}
	}
	for i, err := range a.Router.NotifyAll(ctx, notices) {
		if err != nil {
			return fmt.Errorf("to %s: %w", agents[i], err)
		}
	}
	return nil
}
