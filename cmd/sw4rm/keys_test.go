package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
)

// fakeKeyAdmin records what the CLI asks and answers from keys.
type fakeKeyAdmin struct {
	keyadminpb.UnimplementedKeyAdminServiceServer
	keys []*keyadminpb.AgentKey

	mu       sync.Mutex
	requests []proto.Message
}

func (f *fakeKeyAdmin) record(ctx context.Context, req proto.Message) error {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if len(md.Get("authorization")) == 0 || md.Get("authorization")[0] != "Bearer op-token" {
		return status.Error(codes.Unauthenticated, "permission_denied: the operator token is not valid")
	}
	return nil
}

func (f *fakeKeyAdmin) ListKeys(ctx context.Context, req *keyadminpb.ListKeysRequest) (*keyadminpb.ListKeysResponse, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	var out []*keyadminpb.AgentKey
	for _, k := range f.keys {
		if req.GetAgentId() == "" || k.GetAgentId() == req.GetAgentId() {
			out = append(out, k)
		}
	}
	return &keyadminpb.ListKeysResponse{Keys: out}, nil
}

func (f *fakeKeyAdmin) RevokeKey(ctx context.Context, req *keyadminpb.RevokeKeyRequest) (*keyadminpb.RevokeKeyResponse, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	if req.GetAgentId() == "carol" {
		return nil, status.Error(codes.NotFound, "no_route: revoke the keys of carol: store: not found")
	}
	revoked := &keyadminpb.AgentKey{AgentId: req.GetAgentId(), KeyId: req.GetKeyId(), AddedAt: timestamppb.New(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)),
		RevokedAt: timestamppb.New(time.Date(2025, 3, 2, 9, 0, 0, 0, time.UTC)), RevokedBy: "olga", RevokeReason: req.GetReason()}
	return &keyadminpb.RevokeKeyResponse{Revoked: 1, Keys: []*keyadminpb.AgentKey{revoked}}, nil
}

// serveKeyAdmin serves f on a local port and returns its address.
func serveKeyAdmin(t *testing.T, f *fakeKeyAdmin) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	keyadminpb.RegisterKeyAdminServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// runOut executes the command line and returns stdout, stderr and the error.
func runOut(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestKeysListAndRevoke(t *testing.T) {
	t.Setenv("SW4RM_OPERATOR_TOKEN", "")
	added := timestamppb.New(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	f := &fakeKeyAdmin{keys: []*keyadminpb.AgentKey{
		{AgentId: "alice", KeyId: "ed25519:aaaaaaaaaaaaaaaa", AddedAt: added, NotAfter: timestamppb.New(added.AsTime().Add(time.Hour))},
		{AgentId: "alice", KeyId: "ed25519:bbbbbbbbbbbbbbbb", AddedAt: added, Valid: true},
		{AgentId: "bob", KeyId: "ed25519:cccccccccccccccc", AddedAt: added, RevokedAt: added, RevokedBy: "olga", RevokeReason: "leaked\nbadly"},
	}}
	addr := serveKeyAdmin(t, f)

	out, _, err := runOut(t, "keys", "list", "--server", addr, "--token", "op-token")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Regexp(t, `^AGENT\s+KEY\s+ADDED\s+NOT AFTER\s+STATUS$`, lines[0])
	assert.Regexp(t, `^alice\s+ed25519:aaaaaaaaaaaaaaaa\s+2025-03-01T09:00:00Z\s+2025-03-01T10:00:00Z\s+expired$`, lines[1])
	assert.Regexp(t, `^alice\s+ed25519:bbbbbbbbbbbbbbbb\s+2025-03-01T09:00:00Z\s+-\s+valid$`, lines[2])
	assert.Regexp(t, `^bob\s+ed25519:cccccccccccccccc\s+.*revoked 2025-03-01T09:00:00Z by olga: leaked badly$`, lines[3])

	out, _, err = runOut(t, "keys", "list", "--agent", "bob", "--server", addr, "--token", "op-token")
	require.NoError(t, err)
	assert.NotContains(t, out, "alice")
	assert.Contains(t, out, "bob")

	// The token comes from SW4RM_OPERATOR_TOKEN too; a wrong one is refused with the server's reason.
	t.Setenv("SW4RM_OPERATOR_TOKEN", "wrong")
	_, _, err = runOut(t, "keys", "list", "--server", addr)
	require.Error(t, err)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))

	t.Setenv("SW4RM_OPERATOR_TOKEN", "op-token")
	out, _, err = runOut(t, "keys", "revoke", "alice", "--key", "ed25519:aaaaaaaaaaaaaaaa", "--reason", "laptop stolen", "--server", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "key ed25519:aaaaaaaaaaaaaaaa of alice: 1 key(s) revoked")
	assert.Contains(t, out, "by olga: laptop stolen")
	f.mu.Lock()
	last := f.requests[len(f.requests)-1]
	f.mu.Unlock()
	require.True(t, proto.Equal(&keyadminpb.RevokeKeyRequest{AgentId: "alice", KeyId: "ed25519:aaaaaaaaaaaaaaaa", Reason: "laptop stolen"}, last), "%v", last)

	out, _, err = runOut(t, "keys", "revoke", "alice", "--reason", "compromised", "--server", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "every key of alice: 1 key(s) revoked")

	_, _, err = runOut(t, "keys", "revoke", "carol", "--reason", "x", "--server", addr)
	assert.Equal(t, codes.NotFound, status.Code(err))

	// Without a reason nothing is sent.
	f.mu.Lock()
	n := len(f.requests)
	f.mu.Unlock()
	_, _, err = runOut(t, "keys", "revoke", "alice", "--server", addr)
	require.ErrorContains(t, err, "--reason is required")
	f.mu.Lock()
	assert.Len(t, f.requests, n)
	f.mu.Unlock()
}

func TestKeysGenerate(t *testing.T) {
	check := func(t *testing.T, seedLine, info string) {
		t.Helper()
		require.True(t, strings.HasSuffix(seedLine, "\n"), "one line")
		seed, err := hex.DecodeString(strings.TrimSuffix(seedLine, "\n"))
		require.NoError(t, err)
		require.Len(t, seed, ed25519.SeedSize)
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		require.Equal(t, "public_key: "+base64.StdEncoding.EncodeToString(pub)+"\nkey_id: "+auth.KeyID(auth.AlgorithmEd25519, pub)+"\n", info)
	}

	path := filepath.Join(t.TempDir(), "agent.key")
	out, _, err := runOut(t, "keys", "generate", "--out", path)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	check(t, string(b), out)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// An existing file is never overwritten.
	_, _, err = runOut(t, "keys", "generate", "--out", path)
	require.ErrorContains(t, err, "never overwritten")
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, b, again)

	// Without --out the seed goes to stdout and the public half to stderr; every key is new.
	out, errOut, err := runOut(t, "keys", "generate")
	require.NoError(t, err)
	check(t, out, errOut)
	require.NotEqual(t, string(b), out)
}
