package test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
)

// nodeConnectCall is the Node.js client that signs a call over Connect and HTTP/1.1
// (docs/signing.md, "Over Connect and gRPC-Web").
const nodeConnectCall = "nodeclient/signed_call_connect.mjs"

// nodeConnectOutcome is what the Node.js Connect client printed of one call.
type nodeConnectOutcome struct {
	HTTPStatus, Code, Message, ErrorCode, Response string
}

// node finds Node.js. Without it the test skips, except under CI=true, where it fails:
// .ci/run installs Node.js, so a missing one there is a broken machine, not a smaller suite.
func node(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err == nil {
		return p
	}
	msg := "node is not on PATH: the Node.js client over Connect did not run"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runNodeConnectCall makes one Connect call from the Node.js client to the gRPC port at addr,
// signed as agentID with the key of the 32-byte seed seedHex; args are further flags
// (--register, --format proto, --body TEXT, --tamper-body, --unsigned, ...).
func runNodeConnectCall(t *testing.T, addr, seedHex, agentID string, args ...string) nodeConnectOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node(t), append([]string{nodeConnectCall, "--addr", addr, "--agent", agentID, "--seed-hex", seedHex}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node %s: %s", nodeConnectCall, strings.TrimSpace(stderr.String()))
	out := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimPrefix(v, " ")
		}
	}
	o := nodeConnectOutcome{HTTPStatus: out["http-status"], Code: out["connect-code"], Message: out["connect-message"], ErrorCode: out["sw4rm-error-code"], Response: out["response"]}
	require.NotEmpty(t, o.HTTPStatus, "node %s printed no http-status: %q", nodeConnectCall, stdout.String())
	t.Logf("node connect call %v as %s: HTTP %s, %s %q", args, agentID, o.HTTPStatus, o.Code, o.Message)
	return o
}

// TestNodeConnectClientSignsForTheServer: a client written without Go and without a gRPC or
// protobuf library — Node.js with its built-in http and crypto — is a signed agent over
// Connect and HTTP/1.1 in required mode, in JSON and in binary: it claims an agent id by
// registering its own key in a call signed with that key, and its signed Heartbeats are
// accepted and recorded, the signature covering the body's bytes as sent (any JSON text of the
// message passes when signed as itself). A body changed after signing, a key the agent never
// registered and an unsigned call are refused: HTTP 401, Connect's unauthenticated, the error
// table's permission_denied.
func TestNodeConnectClientSignsForTheServer(t *testing.T) {
	node(t)
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			addr := sys.app.GRPCAddr()
			ctx := context.Background()

			for _, format := range []string{"json", "proto"} {
				t.Run(format, func(t *testing.T) {
					seed := make([]byte, ed25519.SeedSize)
					_, err := rand.Read(seed)
					require.NoError(t, err)
					seedHex := hex.EncodeToString(seed)
					id := uniq(t, "node-connect")

					reg := runNodeConnectCall(t, addr, seedHex, id, "--register", "--format", format)
					require.Equal(t, "200", reg.HTTPStatus, "%s %s", reg.Code, reg.Message)
					if format == "json" {
						assert.JSONEq(t, `{"accepted": true, "reason": ""}`, reg.Response)
					} else {
						assert.Equal(t, "0801", reg.Response, "RegisterAgentResponse{accepted: true} in protobuf")
					}
					rec, err := sys.app.Store().Registry().GetAgent(ctx, id)
					require.NoError(t, err)
					assert.Equal(t, []byte(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)), rec.Descriptor.GetPublicKey(),
						"the key the Node client registered is the agent's")

					hb := runNodeConnectCall(t, addr, seedHex, id, "--format", format)
					require.Equal(t, "200", hb.HTTPStatus, "%s %s", hb.Code, hb.Message)
					if format == "json" {
						assert.JSONEq(t, `{"ok": true}`, hb.Response)
					} else {
						assert.Equal(t, "0801", hb.Response, "HeartbeatResponse{ok: true} in protobuf")
					}
					rec, err = sys.app.Store().Registry().GetAgent(ctx, id)
					require.NoError(t, err)
					assert.False(t, rec.LastHeartbeat.IsZero(), "the signed Heartbeat is recorded")

					for name, args := range map[string][]string{
						"tampered":    {"--format", format, "--tamper-body"},
						"unsigned":    {"--format", format, "--unsigned"},
						"another key": {"--format", format, "--seed-hex", hex.EncodeToString(bytes.Repeat([]byte{7}, ed25519.SeedSize))},
					} {
						o := runNodeConnectCall(t, addr, seedHex, id, args...)
						assert.Equal(t, "401", o.HTTPStatus, name)
						assert.Equal(t, "unauthenticated", o.Code, name)
						assert.True(t, strings.HasPrefix(o.Message, "permission_denied"), "%s: %q", name, o.Message)
						assert.Equal(t, "PERMISSION_DENIED", o.ErrorCode, name)
					}
				})
			}

			// JSON is signed as its bytes: another text of the same message, signed as itself,
			// passes, where a signature over the compact text would not cover it.
			seed := make([]byte, ed25519.SeedSize)
			_, err := rand.Read(seed)
			require.NoError(t, err)
			id := uniq(t, "node-spaced")
			require.Equal(t, "200", runNodeConnectCall(t, addr, hex.EncodeToString(seed), id, "--register").HTTPStatus)
			spaced := runNodeConnectCall(t, addr, hex.EncodeToString(seed), id, "--body", fmt.Sprintf("{ \"agent_id\" : %q,\n  \"state\": \"RUNNING\" }\n", id))
			assert.Equal(t, "200", spaced.HTTPStatus, "%s %s", spaced.Code, spaced.Message)
		})
	}
}
