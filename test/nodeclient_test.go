package test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing/signingtest"
)

// nodeSignedCall is the Node.js client that signs a call without Go (docs/signing.md).
const nodeSignedCall = "nodeclient/signed_call.mjs"

// runNodeSignedCall makes one signed unary call to the gRPC server at addr from the Node.js
// client: by default RegistryService/Heartbeat (method "" means it) of
// HeartbeatRequest{agent_id: agentID}, signed as agentID with the key of the 32-byte seed
// seedHex. extra passes further flags (--body-hex HEX, --tamper-body). It returns the call's
// grpc-status ("0" for OK, "16" for UNAUTHENTICATED, ...) and logs its grpc-message; err is
// set only when no status came back. It skips the test when node is not on PATH.
func runNodeSignedCall(t *testing.T, addr, seedHex, agentID, method string, extra ...string) (grpcStatus string, err error) {
	t.Helper()
	node, lookErr := exec.LookPath("node")
	if lookErr != nil {
		t.Skip("node is not on PATH: the cross-language signed call did not run")
	}
	args := []string{nodeSignedCall, "--addr", addr, "--agent", agentID, "--seed-hex", seedHex}
	if method != "" {
		args = append(args, "--method", method)
	}
	args = append(args, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("node %s: %w: %s", nodeSignedCall, err, strings.TrimSpace(stderr.String()))
	}
	out := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			out[k] = v
		} else if k, ok := strings.CutSuffix(line, ":"); ok {
			out[k] = ""
		}
	}
	grpcStatus, ok := out["grpc-status"]
	if !ok {
		return "", fmt.Errorf("node %s printed no grpc-status: %q", nodeSignedCall, stdout.String())
	}
	name := method
	if name == "" {
		name = "/sw4rm.registry.RegistryService/Heartbeat"
	}
	t.Logf("node signed call %s as %s: grpc-status %s, grpc-message %q", name, agentID, grpcStatus, out["grpc-message"])
	return grpcStatus, nil
}

// heartbeatOnly serves RegistryService.Heartbeat and nothing else.
type heartbeatOnly struct {
	registrypb.UnimplementedRegistryServiceServer
}

func (heartbeatOnly) Heartbeat(context.Context, *registrypb.HeartbeatRequest) (*registrypb.HeartbeatResponse, error) {
	return &registrypb.HeartbeatResponse{Ok: true}, nil
}

// TestNodeSignedCall: a call signed by the Node.js client is accepted by a server that
// verifies signatures over the request bytes it received; the same call signed with a key
// the agent never registered, or changed after signing, is refused with UNAUTHENTICATED.
func TestNodeSignedCall(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: the cross-language signed call did not run")
	}
	v := signingtest.NewVerifier(true)
	g := grpc.NewServer(v.ServerOptions()...)
	registrypb.RegisterRegistryServiceServer(g, heartbeatOnly{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	addr := l.Addr().String()

	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i) // the vectors' key
	}
	const agent = "node-agent"
	v.AddKey(agent, ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	_, stranger, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)

	st, err := runNodeSignedCall(t, addr, hex.EncodeToString(seed), agent, "")
	require.NoError(t, err)
	assert.Equal(t, "0", st, "a correctly signed call is accepted")

	st, err = runNodeSignedCall(t, addr, hex.EncodeToString(stranger.Seed()), agent, "")
	require.NoError(t, err)
	assert.Equal(t, "16", st, "a key the agent never registered is refused")

	st, err = runNodeSignedCall(t, addr, hex.EncodeToString(seed), agent, "", "--tamper-body")
	require.NoError(t, err)
	assert.Equal(t, "16", st, "a body changed after signing is refused")

	st, err = runNodeSignedCall(t, addr, hex.EncodeToString(seed), agent, "/sw4rm.registry.RegistryService/DeregisterAgent")
	require.NoError(t, err)
	assert.Equal(t, "12", st, "verified, then UNIMPLEMENTED by this server: the method is part of what is signed")

	calls := v.Calls()
	require.Len(t, calls, 4)
	body, err := proto.Marshal(&registrypb.HeartbeatRequest{AgentId: agent})
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256(body), calls[0].Digest, "Node's hand-encoded request is the protobuf encoding")
	assert.True(t, calls[0].Signed)
	assert.Equal(t, agent, calls[0].Agent)
	require.NoError(t, calls[0].Err)
	assert.ErrorIs(t, calls[1].Err, signing.ErrBadSignature)
	assert.ErrorIs(t, calls[2].Err, signing.ErrBadSignature)
	require.NoError(t, calls[3].Err)
	assert.Equal(t, "/sw4rm.registry.RegistryService/DeregisterAgent", calls[3].Method)
}
