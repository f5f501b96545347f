package room

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// ErrInvalidOutcome is the kind of the *voting.ValidationError StoreDecision returns for a
// decision whose outcome is not APPROVED, REVISION_REQUESTED or ESCALATED_TO_HITL; like every
// argument refusal it also matches voting.ErrInvalidArgument.
var ErrInvalidOutcome = errors.New("invalid decision outcome")

// MemoryStore is an in-process Store (003's InMemoryNegotiationRoomStore), safe for concurrent
// use. Proposals, votes and decisions are keyed by artifact_id, as in 003; it refuses exactly
// what the server refuses:
//
//   - SubmitProposal validates with voting.ValidateProposal and refuses an artifact_id that
//     is under review, awaiting a human (ESCALATED_TO_HITL) or approved (ErrAlreadyExists);
//     after a REVISION_REQUESTED decision the same artifact_id is accepted as the next
//     version, which replaces the proposal and starts with no votes and no decision (the
//     revision loop).
//   - SubmitVote validates with voting.ValidateVote against the proposal's requested critics
//     and the votes already cast, and refuses votes on unknown (ErrNotFound) or decided
//     (voting.ErrDecided) artifacts.
//   - StoreDecision needs the proposal (ErrNotFound) and a defined outcome
//     (ErrInvalidOutcome); a decision is final except an ESCALATED_TO_HITL one, which a later
//     decision (the human's) may replace.
//
// Messages are copied in and out, so callers may reuse or modify them freely. created_at,
// voted_at and decided_at are set to the current time when omitted, and an empty
// negotiation_room_id becomes DefaultRoomID for proposals and the proposal's room for votes
// and decisions. No coordinator runs inside a MemoryStore: some code must call
// StoreDecision, after which WaitForDecision returns.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string]*memEntry
	order   []string                 // artifact ids in order of first submission
	waiters map[string]chan struct{} // closed when the artifact's decision is stored
}

// memEntry is the state of one artifact.
type memEntry struct {
	proposal *negotiationroompb.NegotiationProposal
	version  int
	votes    []*negotiationroompb.NegotiationVote
	decision *negotiationroompb.NegotiationDecision
}

// NewMemoryStore returns an empty, isolated MemoryStore (the Rust SDK's
// InMemoryNegotiationRoomStore::new()).
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[string]*memEntry{}, waiters: map[string]chan struct{}{}}
}

// SubmitProposal validates and stores a proposal and returns its artifact_id; see MemoryStore
// for the rules.
func (m *MemoryStore) SubmitProposal(_ context.Context, p *negotiationroompb.NegotiationProposal) (string, error) {
	if p == nil {
		return "", voting.ValidateProposal(nil)
	}
	p = proto.Clone(p).(*negotiationroompb.NegotiationProposal)
	p.NegotiationRoomId = roomOr(p.GetNegotiationRoomId(), DefaultRoomID)
	if p.GetCreatedAt() == nil {
		p.CreatedAt = timestamppb.Now()
	}
	if err := voting.ValidateProposal(p); err != nil {
		return "", err
	}
	id := p.GetArtifactId()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok {
		m.entries[id] = &memEntry{proposal: p, version: 1}
		m.order = append(m.order, id)
		return id, nil
	}
	switch e.decision.GetOutcome() {
	case negotiationroompb.DecisionOutcome_REVISION_REQUESTED:
		// The producer's revision: the next version starts afresh.
		e.proposal, e.version, e.votes, e.decision = p, e.version+1, nil, nil
		return id, nil
	case negotiationroompb.DecisionOutcome_APPROVED:
		return "", fmt.Errorf("%w: artifact %q was approved at version %d; submit changes under a new artifact_id", ErrAlreadyExists, id, e.version)
	case negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL:
		return "", fmt.Errorf("%w: artifact %q (version %d) is awaiting a human decision", ErrAlreadyExists, id, e.version)
	default:
		return "", fmt.Errorf("%w: artifact %q (version %d) is still under review in room %q", ErrAlreadyExists, id, e.version, e.proposal.GetNegotiationRoomId())
	}
}

// SubmitVote validates and records a critic's vote; see MemoryStore for the rules.
func (m *MemoryStore) SubmitVote(_ context.Context, v *negotiationroompb.NegotiationVote) error {
	// The argument checks come first, as on the server: a malformed vote is refused as such
	// whatever the room's state. Listing the vote's own critic as requested leaves only them.
	if err := voting.ValidateVote(v, []string{v.GetCriticId()}, nil); err != nil {
		return err
	}
	v = proto.Clone(v).(*negotiationroompb.NegotiationVote)
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(v.GetArtifactId(), v.GetNegotiationRoomId())
	if err != nil {
		return err
	}
	if e.decision != nil {
		return &voting.ValidationError{Kind: voting.ErrDecided, Field: "artifact_id", Msg: fmt.Sprintf(
			"artifact %q (version %d) was already decided (%s)", v.GetArtifactId(), e.version, e.decision.GetOutcome())}
	}
	if err := voting.ValidateVote(v, e.proposal.GetRequestedCritics(), e.votes); err != nil {
		return err
	}
	v.NegotiationRoomId = e.proposal.GetNegotiationRoomId()
	if v.GetVotedAt() == nil {
		v.VotedAt = timestamppb.Now()
	}
	e.votes = append(e.votes, v)
	return nil
}

// lookup finds the artifact's entry, checking that room (when not empty) is its proposal's
// room. The caller holds m.mu.
func (m *MemoryStore) lookup(artifactID, room string) (*memEntry, error) {
	e, ok := m.entries[artifactID]
	if !ok {
		return nil, fmt.Errorf("%w: no proposal for artifact %q", ErrNotFound, artifactID)
	}
	if room != "" && room != e.proposal.GetNegotiationRoomId() {
		return nil, fmt.Errorf("%w: no proposal for artifact %q in room %q (it is in room %q)",
			ErrNotFound, artifactID, room, e.proposal.GetNegotiationRoomId())
	}
	return e, nil
}

// GetVotes returns copies of the votes on the artifact's current version in arrival order;
// an unknown artifact has none (an empty slice, no error).
func (m *MemoryStore) GetVotes(_ context.Context, artifactID string) ([]*negotiationroompb.NegotiationVote, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*negotiationroompb.NegotiationVote{}
	if e, ok := m.entries[artifactID]; ok {
		for _, v := range e.votes {
			out = append(out, proto.Clone(v).(*negotiationroompb.NegotiationVote))
		}
	}
	return out, nil
}

// GetDecision returns a copy of the artifact's decision, or nil when it has none (including
// when the artifact is unknown).
func (m *MemoryStore) GetDecision(_ context.Context, artifactID string) (*negotiationroompb.NegotiationDecision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.decisionLocked(artifactID), nil
}

// decisionLocked returns a copy of the artifact's decision or nil. The caller holds m.mu.
func (m *MemoryStore) decisionLocked(artifactID string) *negotiationroompb.NegotiationDecision {
	if e, ok := m.entries[artifactID]; ok && e.decision != nil {
		return proto.Clone(e.decision).(*negotiationroompb.NegotiationDecision)
	}
	return nil
}

// StoreDecision records a decision on the current version of its artifact and wakes every
// WaitForDecision on it; see MemoryStore for the rules.
func (m *MemoryStore) StoreDecision(_ context.Context, d *negotiationroompb.NegotiationDecision) error {
	if d == nil {
		return &voting.ValidationError{Kind: voting.ErrMissingField, Field: "decision", Msg: "decision is missing"}
	}
	if d.GetArtifactId() == "" {
		return &voting.ValidationError{Kind: voting.ErrMissingField, Field: "artifact_id", Msg: "artifact_id of the decision is empty"}
	}
	switch o := d.GetOutcome(); o {
	case negotiationroompb.DecisionOutcome_APPROVED, negotiationroompb.DecisionOutcome_REVISION_REQUESTED,
		negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL:
	default:
		return &voting.ValidationError{Kind: ErrInvalidOutcome, Field: "outcome", Msg: fmt.Sprintf(
			"outcome %s of the decision on artifact %q is not APPROVED, REVISION_REQUESTED or ESCALATED_TO_HITL", o, d.GetArtifactId())}
	}
	d = proto.Clone(d).(*negotiationroompb.NegotiationDecision)
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(d.GetArtifactId(), d.GetNegotiationRoomId())
	if err != nil {
		return err
	}
	if e.decision != nil && e.decision.GetOutcome() != negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL {
		return &voting.ValidationError{Kind: voting.ErrDecided, Field: "artifact_id", Msg: fmt.Sprintf(
			"artifact %q (version %d) was already decided (%s)", d.GetArtifactId(), e.version, e.decision.GetOutcome())}
	}
	d.NegotiationRoomId = e.proposal.GetNegotiationRoomId()
	if d.GetDecidedAt() == nil {
		d.DecidedAt = timestamppb.Now()
	}
	e.decision = d
	if ch, ok := m.waiters[d.GetArtifactId()]; ok {
		close(ch)
		delete(m.waiters, d.GetArtifactId())
	}
	return nil
}

// WaitForDecision returns the artifact's decision as soon as one is stored, without polling:
// it sleeps until StoreDecision wakes it, the timeout passes (an error wrapping ErrTimeout) or
// ctx ends (ctx's error). The artifact need not exist yet. A zero or negative timeout means
// DefaultWaitTimeout. An ESCALATED_TO_HITL decision is a decision too and is returned.
func (m *MemoryStore) WaitForDecision(ctx context.Context, artifactID string, timeout time.Duration) (*negotiationroompb.NegotiationDecision, error) {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		m.mu.Lock()
		if d := m.decisionLocked(artifactID); d != nil {
			m.mu.Unlock()
			return d, nil
		}
		ch, ok := m.waiters[artifactID]
		if !ok {
			ch = make(chan struct{})
			m.waiters[artifactID] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return nil, fmt.Errorf("%w: no decision for artifact %q within %s", ErrTimeout, artifactID, timeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("room: waiting for the decision on artifact %q: %w", artifactID, ctx.Err())
		}
	}
}

// GetProposal returns a copy of the latest version of the artifact's proposal, or nil when
// there is none.
func (m *MemoryStore) GetProposal(_ context.Context, artifactID string) (*negotiationroompb.NegotiationProposal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[artifactID]; ok {
		return proto.Clone(e.proposal).(*negotiationroompb.NegotiationProposal), nil
	}
	return nil, nil
}

// ListProposals returns copies of the latest proposal of every artifact in room roomID (every
// room when roomID is ""), in the order the artifacts were first submitted.
func (m *MemoryStore) ListProposals(_ context.Context, roomID string) ([]*negotiationroompb.NegotiationProposal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*negotiationroompb.NegotiationProposal{}
	for _, id := range m.order {
		p := m.entries[id].proposal
		if roomID == "" || p.GetNegotiationRoomId() == roomID {
			out = append(out, proto.Clone(p).(*negotiationroompb.NegotiationProposal))
		}
	}
	return out, nil
}

// Compile-time checks that both stores implement Store.
var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*ServerStore)(nil)
)
