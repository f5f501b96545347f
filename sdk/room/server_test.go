package room_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/sdk/room"
)

// fakeServer records what a ServerStore sends and answers with canned responses.
type fakeServer struct {
	negotiationroompb.UnimplementedNegotiationRoomServiceServer
	activitypb.UnimplementedActivityServiceServer

	mu        sync.Mutex
	rooms     []string // negotiation_room_id of every room request, in order
	waitSecs  uint32
	err       error
	artifacts []*activitypb.Artifact
	listed    string
}

func (f *fakeServer) note(room string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rooms = append(f.rooms, room)
	return f.err
}

func (f *fakeServer) SubmitProposal(_ context.Context, r *negotiationroompb.SubmitProposalRequest) (*negotiationroompb.SubmitProposalResponse, error) {
	if err := f.note(r.GetProposal().GetNegotiationRoomId()); err != nil {
		return nil, err
	}
	return &negotiationroompb.SubmitProposalResponse{ArtifactId: r.GetProposal().GetArtifactId(), NegotiationRoomId: r.GetProposal().GetNegotiationRoomId()}, nil
}

func (f *fakeServer) SubmitVote(_ context.Context, r *negotiationroompb.SubmitVoteRequest) (*negotiationroompb.SubmitVoteResponse, error) {
	if err := f.note(r.GetVote().GetNegotiationRoomId()); err != nil {
		return nil, err
	}
	return &negotiationroompb.SubmitVoteResponse{}, nil
}

func (f *fakeServer) GetVotes(_ context.Context, r *negotiationroompb.GetVotesRequest) (*negotiationroompb.GetVotesResponse, error) {
	if err := f.note(r.GetNegotiationRoomId()); err != nil {
		return nil, err
	}
	return &negotiationroompb.GetVotesResponse{Votes: []*negotiationroompb.NegotiationVote{{ArtifactId: r.GetArtifactId(), CriticId: "c1"}}, VoteCount: 1}, nil
}

func (f *fakeServer) GetDecision(_ context.Context, r *negotiationroompb.GetDecisionRequest) (*negotiationroompb.GetDecisionResponse, error) {
	if err := f.note(r.GetNegotiationRoomId()); err != nil {
		return nil, err
	}
	return &negotiationroompb.GetDecisionResponse{}, nil
}

func (f *fakeServer) WaitForDecision(_ context.Context, r *negotiationroompb.WaitForDecisionRequest) (*negotiationroompb.WaitForDecisionResponse, error) {
	f.mu.Lock()
	f.waitSecs = r.GetTimeoutSeconds()
	f.mu.Unlock()
	if err := f.note(r.GetNegotiationRoomId()); err != nil {
		return nil, err
	}
	return &negotiationroompb.WaitForDecisionResponse{Decision: &negotiationroompb.NegotiationDecision{
		ArtifactId: r.GetArtifactId(), Outcome: negotiationroompb.DecisionOutcome_APPROVED}}, nil
}

func (f *fakeServer) ListArtifacts(_ context.Context, r *activitypb.ListArtifactsRequest) (*activitypb.ListArtifactsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = r.GetNegotiationId() + "|" + r.GetKind()
	if f.err != nil {
		return nil, f.err
	}
	return &activitypb.ListArtifactsResponse{Items: f.artifacts}, nil
}

func (f *fakeServer) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeServer) setArtifacts(a ...*activitypb.Artifact) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.artifacts = a
}

func (f *fakeServer) wait() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitSecs
}

func (f *fakeServer) lastRoom() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rooms[len(f.rooms)-1]
}

func startFake(t *testing.T) (*fakeServer, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	f := &fakeServer{}
	g := grpc.NewServer()
	negotiationroompb.RegisterNegotiationRoomServiceServer(g, f)
	activitypb.RegisterActivityServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return f, conn
}

func TestServerStoreRoomResolution(t *testing.T) {
	f, conn := startFake(t)
	ctx := context.Background()
	s := room.NewServerStore(conn)
	require.Equal(t, room.DefaultRoomID, s.RoomID())
	c := room.NewWithStore(s)

	p := proposal("a1")
	p.NegotiationRoomId = ""
	_, err := c.SubmitProposal(ctx, p)
	require.NoError(t, err)
	require.Equal(t, room.DefaultRoomID, f.lastRoom(), "a proposal without a room goes to the store's room")

	p = proposal("a2") // names room-1
	_, err = c.SubmitProposal(ctx, p)
	require.NoError(t, err)
	require.Equal(t, "room-1", f.lastRoom())
	_, err = c.GetVotes(ctx, "a2")
	require.NoError(t, err)
	require.Equal(t, "room-1", f.lastRoom(), "the room of a proposal submitted through the store is remembered")
	require.NoError(t, c.SubmitVote(ctx, vote("a2", "critic-1", 8, 0.9, true)))
	require.Equal(t, "room-1", f.lastRoom())
	_, err = c.GetDecision(ctx, "unknown-here")
	require.NoError(t, err)
	require.Equal(t, room.DefaultRoomID, f.lastRoom())

	other := room.NewWithStore(room.NewServerStore(conn, room.WithRoomID("review")))
	v := vote("x", "critic-1", 8, 0.9, true)
	require.NoError(t, other.SubmitVote(ctx, v))
	require.Equal(t, "review", f.lastRoom())
	v.NegotiationRoomId = "explicit"
	require.NoError(t, other.SubmitVote(ctx, v))
	require.Equal(t, "explicit", f.lastRoom(), "a vote's own room wins")

	d, err := other.WaitForDecision(ctx, "x", 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome())
	require.Equal(t, uint32(2), f.wait(), "rounded up to whole seconds")
	_, _ = other.WaitForDecision(ctx, "x", 0)
	require.Equal(t, uint32(30), f.wait(), "zero means the default")
}

func TestServerStoreErrors(t *testing.T) {
	f, conn := startFake(t)
	ctx := context.Background()
	c := room.NewWithStore(room.NewServerStore(conn))

	f.setErr(status.Error(codes.NotFound, "no proposal"))
	votes, err := c.GetVotes(ctx, "a1")
	require.NoError(t, err)
	require.Empty(t, votes)
	d, err := c.GetDecision(ctx, "a1")
	require.NoError(t, err)
	require.Nil(t, d)
	err = c.SubmitVote(ctx, vote("a1", "c1", 8, 0.9, true))
	require.ErrorIs(t, err, room.ErrNotFound)
	require.Equal(t, codes.NotFound, status.Code(err), "the gRPC status survives")
	require.ErrorContains(t, err, "no proposal")

	f.setErr(status.Error(codes.AlreadyExists, "still under review"))
	_, err = c.SubmitProposal(ctx, proposal("a1"))
	require.ErrorIs(t, err, room.ErrAlreadyExists)
	f.setErr(status.Error(codes.AlreadyExists, "critic already voted"))
	require.ErrorIs(t, c.SubmitVote(ctx, vote("a1", "c1", 8, 0.9, true)), voting.ErrAlreadyVoted)
	f.setErr(status.Error(codes.PermissionDenied, "not requested"))
	require.ErrorIs(t, c.SubmitVote(ctx, vote("a1", "c1", 8, 0.9, true)), voting.ErrNotRequested)
	f.setErr(status.Error(codes.FailedPrecondition, "already decided"))
	require.ErrorIs(t, c.SubmitVote(ctx, vote("a1", "c1", 8, 0.9, true)), voting.ErrDecided)
	f.setErr(status.Error(codes.InvalidArgument, "validation_error: bad"))
	require.ErrorIs(t, c.SubmitVote(ctx, vote("a1", "c1", 8, 0.9, true)), voting.ErrInvalidArgument)
	f.setErr(status.Error(codes.DeadlineExceeded, "no final decision"))
	_, err = c.WaitForDecision(ctx, "a1", time.Second)
	require.ErrorIs(t, err, room.ErrTimeout)
	f.setErr(status.Error(codes.Unavailable, "down"))
	_, err = c.GetVotes(ctx, "a1")
	require.Equal(t, codes.Unavailable, status.Code(err))

	err = c.StoreDecision(ctx, decision("a1", negotiationroompb.DecisionOutcome_APPROVED))
	require.ErrorIs(t, err, room.ErrUnsupported)
	require.ErrorContains(t, err, "coordinator")
	_, err = c.ListProposals(ctx, "room-1")
	require.ErrorIs(t, err, room.ErrUnsupported)
	require.ErrorContains(t, err, "listing")
}

func TestServerStoreGetProposalTakesTheHighestVersion(t *testing.T) {
	f, conn := startFake(t)
	ctx := context.Background()
	c := room.NewWithStore(room.NewServerStore(conn, room.WithRoomID("review")))

	p, err := c.GetProposal(ctx, "a1")
	require.NoError(t, err)
	require.Nil(t, p, "no versions")
	f.mu.Lock()
	require.Equal(t, "room/review/a1|proposal", f.listed)
	f.mu.Unlock()

	enc := func(body string) []byte {
		p := proposal("a1")
		p.Artifact = []byte(body)
		b, err := proto.Marshal(p)
		require.NoError(t, err)
		return b
	}
	f.setArtifacts(
		&activitypb.Artifact{Kind: "proposal", Version: "2", ContentType: "application/protobuf", Content: enc("v2")},
		&activitypb.Artifact{Kind: "proposal", Version: "10", ContentType: "application/protobuf", Content: enc("v10")},
		&activitypb.Artifact{Kind: "proposal", Version: "9", ContentType: "application/protobuf", Content: enc("v9")},
	)
	p, err = c.GetProposal(ctx, "a1")
	require.NoError(t, err)
	require.Equal(t, "v10", string(p.GetArtifact()), "versions compare as numbers")

	f.setArtifacts(&activitypb.Artifact{Kind: "proposal", Version: "1", ContentType: "application/protobuf", Content: []byte{0xff}})
	_, err = c.GetProposal(ctx, "a1")
	require.ErrorContains(t, err, "decode version 1")
}
