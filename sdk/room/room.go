// Package room is the Go Negotiation Room Client: the producer–critic–coordinator pattern of
// RFC §17.5 with the API of the SDK guide's "Negotiation Room Client" (003 §6.14). Producers
// submit artifacts for review, critics vote on them, a coordinator aggregates the votes and
// records a decision, and producers wait for that decision or inspect proposals.
//
// A Client is backed by a pluggable Store. Two are provided:
//
//   - MemoryStore keeps everything in the process. It applies the server's validation rules
//     (voting.ValidateProposal and voting.ValidateVote), but no coordinator runs in it: some
//     code of yours must aggregate the votes and call StoreDecision (003 §6.14.4, "Custom
//     Coordinator Guide"). New uses the process-wide default MemoryStore, as the Python and
//     JS/TS SDKs do ("shared in-memory store per process"); NewWithStore takes any Store.
//   - ServerStore talks to a SW4RM server's canonical NegotiationRoomService, whose
//     coordinator workflow sends each proposal to its critics, collects their votes, decides
//     by policy (escalating to a human when the policy says so) and announces the decision.
//
// The messages are the canonical protobuf types of package negotiationroompb, and the vote
// aggregation strategies are those of package voting; Aggregate re-exports voting.Aggregate.
package room

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// DefaultRoomID is the room of proposals and votes that name none; the server uses the same
// name.
const DefaultRoomID = "default"

// DefaultWaitTimeout is WaitForDecision's timeout when the caller passes zero or a negative
// duration (003 §6.14.3: "timeout_s: float = 30.0").
const DefaultWaitTimeout = 30 * time.Second

// Errors every Store reports in the same way; test them with errors.Is. Refusals of invalid
// proposals and votes are *voting.ValidationError values and match voting's sentinels
// (voting.ErrInvalidArgument, voting.ErrNotRequested, voting.ErrAlreadyVoted, ...); a vote or
// decision on an artifact that is already decided matches voting.ErrDecided.
var (
	// ErrNotFound is returned when an operation needs a proposal that does not exist.
	ErrNotFound = errors.New("room: not found")
	// ErrAlreadyExists is returned by SubmitProposal for an artifact_id that is still under
	// review, awaiting a human, or already approved; only a REVISION_REQUESTED decision lets
	// the producer submit the same artifact_id again, as its next version.
	ErrAlreadyExists = errors.New("room: already exists")
	// ErrTimeout is returned by WaitForDecision when no decision arrived within the timeout.
	ErrTimeout = errors.New("room: timed out waiting for a decision")
	// ErrUnsupported is returned by a Store for an operation its backend cannot perform; the
	// error's message says why.
	ErrUnsupported = errors.New("room: unsupported by this store")
)

// Store is the storage backend of a Client (003's NegotiationRoomStore): every Client method
// delegates to the method of the same name.
type Store interface {
	// SubmitProposal stores a proposal for review and returns its artifact_id.
	SubmitProposal(ctx context.Context, p *negotiationroompb.NegotiationProposal) (string, error)
	// SubmitVote records a critic's vote on a proposal.
	SubmitVote(ctx context.Context, v *negotiationroompb.NegotiationVote) error
	// GetVotes returns the votes on the current version of an artifact.
	GetVotes(ctx context.Context, artifactID string) ([]*negotiationroompb.NegotiationVote, error)
	// GetDecision returns the artifact's decision, or nil when there is none yet.
	GetDecision(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationDecision, error)
	// StoreDecision records a coordinator's decision.
	StoreDecision(ctx context.Context, d *negotiationroompb.NegotiationDecision) error
	// WaitForDecision blocks until the artifact has a decision or the timeout passes.
	WaitForDecision(ctx context.Context, artifactID string, timeout time.Duration) (*negotiationroompb.NegotiationDecision, error)
	// GetProposal returns the latest version of an artifact's proposal, or nil when none.
	GetProposal(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationProposal, error)
	// ListProposals returns the proposals of a room, or of every room when roomID is "".
	ListProposals(ctx context.Context, roomID string) ([]*negotiationroompb.NegotiationProposal, error)
}

// Client is the Negotiation Room Client of 003 §6.14: a thin, store-agnostic API for
// producers, critics and coordinators. It is safe for concurrent use when its Store is.
type Client struct {
	store Store
}

// New returns a Client backed by the process-wide default MemoryStore (see DefaultStore), so
// every Client made with New in one process shares proposals, votes and decisions.
func New() *Client { return &Client{store: DefaultStore()} }

// NewWithStore returns a Client backed by store; a nil store means the default MemoryStore.
func NewWithStore(store Store) *Client {
	if store == nil {
		store = DefaultStore()
	}
	return &Client{store: store}
}

// Store returns the Client's storage backend.
func (c *Client) Store() Store { return c.store }

// SubmitProposal submits an artifact for review by its requested critics and returns its
// artifact_id (003: submit_proposal). created_at is set when omitted and an empty
// negotiation_room_id means DefaultRoomID (for a ServerStore, the store's room).
func (c *Client) SubmitProposal(ctx context.Context, p *negotiationroompb.NegotiationProposal) (string, error) {
	return c.store.SubmitProposal(ctx, p)
}

// SubmitVote records a critic's vote (003: submit_vote); voted_at is set when omitted.
func (c *Client) SubmitVote(ctx context.Context, v *negotiationroompb.NegotiationVote) error {
	return c.store.SubmitVote(ctx, v)
}

// GetVotes returns the votes cast so far on the artifact's current version, in arrival order
// (003: get_votes); an unknown artifact has no votes.
func (c *Client) GetVotes(ctx context.Context, artifactID string) ([]*negotiationroompb.NegotiationVote, error) {
	return c.store.GetVotes(ctx, artifactID)
}

// GetDecision returns the artifact's decision, or nil when it has none yet (003:
// get_decision).
func (c *Client) GetDecision(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationDecision, error) {
	return c.store.GetDecision(ctx, artifactID)
}

// StoreDecision records a coordinator's final decision for producers to retrieve (003:
// store_decision); decided_at is set when omitted.
func (c *Client) StoreDecision(ctx context.Context, d *negotiationroompb.NegotiationDecision) error {
	return c.store.StoreDecision(ctx, d)
}

// WaitForDecision blocks until the artifact has a decision, the timeout passes (an error
// wrapping ErrTimeout) or ctx ends (003: wait_for_decision). A zero or negative timeout means
// DefaultWaitTimeout.
func (c *Client) WaitForDecision(ctx context.Context, artifactID string, timeout time.Duration) (*negotiationroompb.NegotiationDecision, error) {
	return c.store.WaitForDecision(ctx, artifactID, timeout)
}

// GetProposal returns the latest version of the artifact's proposal, or nil when there is
// none (003: get_proposal).
func (c *Client) GetProposal(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationProposal, error) {
	return c.store.GetProposal(ctx, artifactID)
}

// ListProposals returns the proposals of the room roomID, or of every room when roomID is ""
// (003: list_proposals).
func (c *Client) ListProposals(ctx context.Context, roomID string) ([]*negotiationroompb.NegotiationProposal, error) {
	return c.store.ListProposals(ctx, roomID)
}

// Aggregate computes the AggregatedScore of votes under strategy, whose result is stored in
// weighted_mean (003 §6.14.5); it is voting.Aggregate with the arguments in the order of the
// SDKs' aggregate_votes, for custom coordinators. An empty strategy means
// voting.DefaultStrategy (confidence_weighted).
func Aggregate(votes []*negotiationroompb.NegotiationVote, strategy voting.Strategy) *negotiationroompb.AggregatedScore {
	return voting.Aggregate(strategy, votes)
}

var (
	defaultMu    sync.Mutex
	defaultStore *MemoryStore
)

// DefaultStore returns the process-wide MemoryStore that New uses, allocating it on first use
// (003: get_default_negotiation_room_store).
func DefaultStore() *MemoryStore {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultStore == nil {
		defaultStore = NewMemoryStore()
	}
	return defaultStore
}

// ResetDefaultStore drops the process-wide default MemoryStore, so the next New or
// DefaultStore allocates a fresh, empty one; Clients made earlier keep the old store (003:
// reset_default_negotiation_room_store, "primarily for tests").
func ResetDefaultStore() {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	defaultStore = nil
}

// roomOr returns id, or def when id is empty.
func roomOr(id, def string) string {
	if id == "" {
		return def
	}
	return id
}
