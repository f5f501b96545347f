package room

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// Artifact kinds and negotiation ids under which the server keeps each version of a room's
// proposals and decisions in the ActivityService (activities/room.go).
const (
	// ArtifactKindProposal is the kind of a stored proposal version.
	ArtifactKindProposal = "proposal"
	// ArtifactKindDecision is the kind of a stored final decision.
	ArtifactKindDecision = "decision"
)

// NegotiationID is the ActivityService negotiation_id, and the coordinator's Temporal workflow
// id, of an artifact in a room: "room/<room_id>/<artifact_id>".
func NegotiationID(roomID, artifactID string) string { return "room/" + roomID + "/" + artifactID }

// ServerStore is a Store backed by a SW4RM server: the canonical NegotiationRoomService for
// proposals, votes and decisions, and the ActivityService for proposal versions. The server's
// coordinator (one Temporal workflow per artifact version, room/<room_id>/<artifact_id>) sends
// each proposal to its requested critics, decides by policy once they have voted, escalates to
// a human when the policy says so, and sends the decision to the producer and the critics.
//
// The canonical RPCs address an artifact by room and artifact id, while the Client API passes
// only the artifact id. A ServerStore therefore remembers the room of every proposal submitted
// through it and uses its own room (WithRoomID, default DefaultRoomID) for other artifacts;
// votes and proposals that name their negotiation_room_id use it.
//
// Differences from a MemoryStore, which follow from the server being the coordinator:
// StoreDecision and ListProposals fail with ErrUnsupported; GetDecision shows an
// ESCALATED_TO_HITL decision while a human decides, whereas WaitForDecision returns only the
// final decision; the server's WaitForDecision counts whole seconds, so a timeout is rounded
// up to the next second; and GetVotes, GetDecision and GetProposal of an artifact the server
// does not know return no votes, nil and nil.
//
// Server refusals keep their gRPC status (status.Code works on the returned errors) and also
// match this package's and voting's sentinels: NotFound is ErrNotFound, AlreadyExists is
// ErrAlreadyExists for a proposal and voting.ErrAlreadyVoted for a vote, InvalidArgument is
// voting.ErrInvalidArgument, PermissionDenied is voting.ErrNotRequested, FailedPrecondition is
// voting.ErrDecided, and DeadlineExceeded from WaitForDecision is ErrTimeout.
type ServerStore struct {
	rooms     negotiationroompb.NegotiationRoomServiceClient
	artifacts activitypb.ActivityServiceClient
	roomID    string

	mu    sync.Mutex
	known map[string]string // artifact id → room id of proposals submitted through this store
}

// ServerStoreOption configures a ServerStore.
type ServerStoreOption func(*ServerStore)

// WithRoomID sets the room used for proposals and votes that name no negotiation_room_id and
// for artifact-id-only calls on artifacts not submitted through this store; "" keeps
// DefaultRoomID.
func WithRoomID(roomID string) ServerStoreOption {
	return func(s *ServerStore) { s.roomID = roomOr(roomID, DefaultRoomID) }
}

// NewServerStore returns a ServerStore that calls the SW4RM server over conn, for example an
// sdk.Agent's ClientConn().
func NewServerStore(conn grpc.ClientConnInterface, opts ...ServerStoreOption) *ServerStore {
	s := &ServerStore{
		rooms:     negotiationroompb.NewNegotiationRoomServiceClient(conn),
		artifacts: activitypb.NewActivityServiceClient(conn),
		roomID:    DefaultRoomID,
		known:     map[string]string{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// RoomID returns the store's room (see WithRoomID).
func (s *ServerStore) RoomID() string { return s.roomID }

// roomFor returns the room of an artifact: explicit when not empty, else the room of the
// proposal submitted through this store, else the store's room.
func (s *ServerStore) roomFor(artifactID, explicit string) string {
	if explicit != "" {
		return explicit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.known[artifactID]; ok {
		return r
	}
	return s.roomID
}

// SubmitProposal sends the proposal to the server (NegotiationRoomService.SubmitProposal),
// which validates it, checks that the requested critics are registered agents, and starts
// the coordinator of its next version; it returns the artifact_id.
func (s *ServerStore) SubmitProposal(ctx context.Context, p *negotiationroompb.NegotiationProposal) (string, error) {
	if p != nil {
		p = proto.Clone(p).(*negotiationroompb.NegotiationProposal)
		p.NegotiationRoomId = roomOr(p.GetNegotiationRoomId(), s.roomID)
	}
	resp, err := s.rooms.SubmitProposal(ctx, &negotiationroompb.SubmitProposalRequest{Proposal: p})
	if err != nil {
		return "", rpcErr("submit proposal", err, ErrAlreadyExists)
	}
	s.mu.Lock()
	s.known[resp.GetArtifactId()] = roomOr(resp.GetNegotiationRoomId(), p.GetNegotiationRoomId())
	s.mu.Unlock()
	return resp.GetArtifactId(), nil
}

// SubmitVote sends a critic's vote to the artifact's coordinator
// (NegotiationRoomService.SubmitVote), which refuses it synchronously when it breaks the rules.
func (s *ServerStore) SubmitVote(ctx context.Context, v *negotiationroompb.NegotiationVote) error {
	if v != nil {
		v = proto.Clone(v).(*negotiationroompb.NegotiationVote)
		v.NegotiationRoomId = s.roomFor(v.GetArtifactId(), v.GetNegotiationRoomId())
	}
	if _, err := s.rooms.SubmitVote(ctx, &negotiationroompb.SubmitVoteRequest{Vote: v}); err != nil {
		return rpcErr("submit vote", err, voting.ErrAlreadyVoted, voting.ErrFailedPrecondition)
	}
	return nil
}

// GetVotes returns the votes on the artifact's current version (NegotiationRoomService.GetVotes);
// an artifact unknown to the server has none.
func (s *ServerStore) GetVotes(ctx context.Context, artifactID string) ([]*negotiationroompb.NegotiationVote, error) {
	resp, err := s.rooms.GetVotes(ctx, &negotiationroompb.GetVotesRequest{ArtifactId: artifactID, NegotiationRoomId: s.roomFor(artifactID, "")})
	if status.Code(err) == codes.NotFound {
		return []*negotiationroompb.NegotiationVote{}, nil
	}
	if err != nil {
		return nil, rpcErr("get votes", err)
	}
	out := resp.GetVotes()
	if out == nil {
		out = []*negotiationroompb.NegotiationVote{}
	}
	return out, nil
}

// GetDecision returns the current decision of the artifact (NegotiationRoomService.GetDecision):
// nil while votes are awaited or when the server does not know the artifact,
// ESCALATED_TO_HITL while a human decides, then the final decision.
func (s *ServerStore) GetDecision(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationDecision, error) {
	resp, err := s.rooms.GetDecision(ctx, &negotiationroompb.GetDecisionRequest{ArtifactId: artifactID, NegotiationRoomId: s.roomFor(artifactID, "")})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, rpcErr("get decision", err)
	}
	return resp.GetDecision(), nil
}

// StoreDecision is not supported by a ServerStore: it returns an error wrapping
// ErrUnsupported. On the server the coordinator workflow decides by its policy (and a human
// after an escalation, through the HITL service); the canonical NegotiationRoomService has no
// RPC that lets a client record a decision.
func (s *ServerStore) StoreDecision(_ context.Context, d *negotiationroompb.NegotiationDecision) error {
	return fmt.Errorf("%w: cannot store the decision on artifact %q: on a SW4RM server the room's coordinator workflow decides by policy (escalated decisions are answered through the HITL service), and NegotiationRoomService has no RPC to record a client's decision; use a MemoryStore for a custom coordinator",
		ErrUnsupported, d.GetArtifactId())
}

// WaitForDecision blocks on NegotiationRoomService.WaitForDecision until the artifact's final
// decision (after any human review), the timeout (rounded up to whole seconds; an error
// wrapping ErrTimeout) or the end of ctx. An artifact unknown to the server is an error
// wrapping ErrNotFound at once.
func (s *ServerStore) WaitForDecision(ctx context.Context, artifactID string, timeout time.Duration) (*negotiationroompb.NegotiationDecision, error) {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	secs := math.Ceil(timeout.Seconds())
	if secs > math.MaxUint32 {
		secs = math.MaxUint32
	}
	resp, err := s.rooms.WaitForDecision(ctx, &negotiationroompb.WaitForDecisionRequest{
		ArtifactId: artifactID, NegotiationRoomId: s.roomFor(artifactID, ""), TimeoutSeconds: uint32(secs),
	})
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			return nil, &serverError{op: "wait for decision", kinds: []error{ErrTimeout}, err: err}
		}
		return nil, rpcErr("wait for decision", err)
	}
	if resp.GetDecision() == nil {
		return nil, fmt.Errorf("%w: no decision for artifact %q within %s", ErrTimeout, artifactID, timeout)
	}
	return resp.GetDecision(), nil
}

// GetProposal returns the highest stored version of the artifact's proposal, read from the
// server's ActivityService (ListArtifacts of negotiation_id "room/<room_id>/<artifact_id>",
// kind "proposal"), or nil when there is none.
func (s *ServerStore) GetProposal(ctx context.Context, artifactID string) (*negotiationroompb.NegotiationProposal, error) {
	if artifactID == "" {
		return nil, &voting.ValidationError{Kind: voting.ErrMissingField, Field: "artifact_id", Msg: "artifact_id is empty"}
	}
	nid := NegotiationID(s.roomFor(artifactID, ""), artifactID)
	resp, err := s.artifacts.ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: nid, Kind: ArtifactKindProposal})
	if err != nil {
		return nil, rpcErr("get proposal", err)
	}
	var latest *activitypb.Artifact
	best := -1
	for _, a := range resp.GetItems() {
		if a.GetKind() != ArtifactKindProposal {
			continue
		}
		n, err := strconv.Atoi(a.GetVersion())
		if err != nil {
			continue // not a version the coordinator wrote
		}
		if n > best {
			best, latest = n, a
		}
	}
	if latest == nil {
		return nil, nil
	}
	p := &negotiationroompb.NegotiationProposal{}
	if strings.Contains(latest.GetContentType(), "json") {
		err = protojson.Unmarshal(latest.GetContent(), p)
	} else {
		err = proto.Unmarshal(latest.GetContent(), p)
	}
	if err != nil {
		return nil, fmt.Errorf("room: get proposal: decode version %d of %s: %w", best, nid, err)
	}
	return p, nil
}

// ListProposals is not supported by a ServerStore: it returns an error wrapping
// ErrUnsupported, because listing a room's proposals is not part of the canonical
// NegotiationRoomService contract (which addresses one artifact at a time) and the
// ActivityService lists only one negotiation_id's artifacts.
func (s *ServerStore) ListProposals(_ context.Context, roomID string) ([]*negotiationroompb.NegotiationProposal, error) {
	return nil, fmt.Errorf("%w: cannot list the proposals of room %q: the canonical NegotiationRoomService has no listing RPC and ActivityService.ListArtifacts needs one artifact's negotiation_id (room/<room_id>/<artifact_id>); use GetProposal for a known artifact",
		ErrUnsupported, roomID)
}

// serverError is a failed call: the operation, the sentinels it matches and the gRPC error.
type serverError struct {
	op    string
	kinds []error
	err   error
}

// Error returns "room: <op>: <gRPC code>: <server's message>".
func (e *serverError) Error() string {
	st := status.Convert(e.err)
	return fmt.Sprintf("room: %s: %s: %s", e.op, st.Code(), st.Message())
}

// Unwrap exposes the sentinels and the gRPC error (for status.Code and errors.Is).
func (e *serverError) Unwrap() []error { return append(append([]error{}, e.kinds...), e.err) }

// GRPCStatus returns the server's status, so status.Code and status.FromError see it.
func (e *serverError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// rpcErr wraps a failed RPC, mapping its gRPC code to the sentinels of this package and
// package voting; exists are the sentinels of AlreadyExists for this operation.
func rpcErr(op string, err error, exists ...error) error {
	var kinds []error
	switch status.Code(err) {
	case codes.NotFound:
		kinds = []error{ErrNotFound}
	case codes.AlreadyExists:
		kinds = exists
	case codes.InvalidArgument:
		kinds = []error{voting.ErrInvalidArgument}
	case codes.PermissionDenied:
		kinds = []error{voting.ErrNotRequested, voting.ErrFailedPrecondition}
	case codes.FailedPrecondition:
		kinds = []error{voting.ErrDecided, voting.ErrFailedPrecondition}
	}
	return &serverError{op: op, kinds: kinds, err: err}
}
