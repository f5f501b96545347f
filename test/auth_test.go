package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// The operator of the authentication tests.
const (
	authOperator      = "ops"
	authOperatorToken = "ops-token-for-tests"
)

// authConfig is a test configuration in the given authentication mode, with one operator.
func authConfig(t testing.TB, kind string, mode auth.Mode) app.Config {
	cfg := newConfig(t, kind)
	cfg.Auth = mode
	cfg.HITLOperators = authOperator + "=" + authOperatorToken
	// Every process of a deployment shares the HITL decision key (docs/hitl.md); a second
	// frontend started with this configuration needs it.
	cfg.HITLDecisionKeyFile = writeKeyFile(t, decisionKeySeed)
	return cfg
}

// signedAgent is an SDK agent whose every call is signed with its own key.
type signedAgent struct {
	*sdk.Agent
	signer *testSigner
	pub    ed25519.PublicKey
}

// dialSigned connects as a new agent named name with a fresh key and registers it with that
// key (§6.2: keys travel in the registry handshake).
func dialSigned(t testing.TB, sys *system, name string) *signedAgent {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	s := &testSigner{agent: uniq(t, name), key: priv}
	a, err := sdk.Dial(sys.app.GRPCAddr(), s.agent, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.dialOptions()...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.NoError(t, a.Register(context.Background(), descriptor(s.agent, name, pub)))
	return &signedAgent{Agent: a, signer: s, pub: pub}
}

func descriptor(id, name string, pub ed25519.PublicKey) *registrypb.AgentDescriptor {
	return &registrypb.AgentDescriptor{AgentId: id, Name: name, Description: "authentication test agent " + name, Capabilities: []string{"test"},
		CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json"}, PublicKey: pub}
}

// operatorContext is a context carrying the test operator's token.
func operatorContext() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+authOperatorToken)
}

// refused asserts that err is a refusal with code, the permission_denied error_code in its
// message and trailer, and that the refusal of method was audited.
func refused(t *testing.T, sys *system, err error, trailer metadata.MD, code codes.Code, method string) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "permission_denied: ")
	if trailer != nil {
		assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ErrorCodeTrailer))
	}
	require.Eventually(t, func() bool {
		evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{TypePrefix: "auth.refused", Limit: 1000})
		if err != nil {
			return false
		}
		for _, e := range evs {
			var d map[string]any
			if json.Unmarshal(e.Details, &d) == nil && d["method"] == method {
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the refusal of %s is audited", method)
}

// TestRequiredAuthRefusesImpersonation: in required mode no agent can act as another. Each
// attempt is refused with UNAUTHENTICATED or PERMISSION_DENIED and the permission_denied
// error_code, audited, and changes nothing (§6.2, §6.5, §23).
func TestRequiredAuthRefusesImpersonation(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			alice, bob, mallory := dialSigned(t, sys, "alice"), dialSigned(t, sys, "bob"), dialSigned(t, sys, "mallory")
			bobIn := openInbox(t, bob.Agent)
			waitState(t, sys, bob.ID(), commonpb.AgentState_RUNNABLE)

			// The legitimate flow works: alice sends to bob, bob receives and acknowledges.
			sent, err := alice.Send(ctx, sdk.Message{To: bob.ID(), Payload: []byte(`{"hello":"bob"}`)})
			require.NoError(t, err)
			got := bobIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })

			router := routerpb.NewRouterServiceClient(mallory.Conn())
			registry := registrypb.NewRegistryServiceClient(mallory.Conn())
			scheduler := schedulerpb.NewSchedulerServiceClient(mallory.Conn())
			var tr metadata.MD

			t.Run("stream another agent's inbox", func(t *testing.T) {
				s, err := router.StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: bob.ID()})
				require.NoError(t, err)
				_, err = s.Recv()
				refused(t, sys, err, s.Trailer(), codes.PermissionDenied, routerpb.RouterService_StreamIncoming_FullMethodName)
			})
			t.Run("confirm another agent's delivery", func(t *testing.T) {
				_, err := router.AckDelivery(ctx, &routerpb.DeliveryAckRequest{AgentId: bob.ID(), Seq: got.Seq, MessageId: sent.GetMessageId()}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, routerpb.RouterService_AckDelivery_FullMethodName)
			})
			t.Run("send as another producer", func(t *testing.T) {
				env := &commonpb.Envelope{MessageId: "m-" + uniq(t, "forged"), ProducerId: alice.ID(), CorrelationId: "c-forged", SequenceNumber: 1,
					MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2}
				_, err := router.SendMessage(ctx, &routerpb.SendMessageRequest{Msg: env}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, routerpb.RouterService_SendMessage_FullMethodName)
				_, err = sys.app.Store().Messages().GetMessage(ctx, env.GetMessageId())
				assert.ErrorIs(t, err, store.ErrNotFound, "nothing was admitted")
			})
			t.Run("acknowledge a message sent to someone else", func(t *testing.T) {
				// As itself, mallory is refused by the router: only the recipient may ACK (§11).
				err := mallory.Ack(ctx, sent, commonpb.AckStage_FULFILLED, 0, "")
				assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, sdk.CodeOf(err), "%v", err)
				// As bob, it is refused at the edge.
				ack := &commonpb.Envelope{MessageId: "m-" + uniq(t, "forged-ack"), ProducerId: bob.ID(), CorrelationId: sent.GetCorrelationId(), SequenceNumber: 2,
					MessageType: commonpb.MessageType_ACKNOWLEDGEMENT, ContentType: "application/json"}
				_, err = router.SendMessage(ctx, &routerpb.SendMessageRequest{Msg: ack}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, routerpb.RouterService_SendMessage_FullMethodName)
				rec, err := sys.app.Store().Messages().GetMessage(ctx, sent.GetMessageId())
				require.NoError(t, err)
				assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State, "the message did not move")
			})
			t.Run("vote as another critic", func(t *testing.T) {
				_, err := negotiationroompb.NewNegotiationRoomServiceClient(mallory.Conn()).SubmitVote(ctx, &negotiationroompb.SubmitVoteRequest{Vote: &negotiationroompb.NegotiationVote{
					ArtifactId: "art-1", CriticId: bob.ID(), Score: 9, Confidence: 1, Passed: true, NegotiationRoomId: "room-1"}}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, negotiationroompb.NegotiationRoomService_SubmitVote_FullMethodName)
			})
			t.Run("heartbeat another agent", func(t *testing.T) {
				_, err := registry.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: bob.ID(), State: commonpb.AgentState_SHUTTING_DOWN}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, registrypb.RegistryService_Heartbeat_FullMethodName)
			})
			t.Run("deregister another agent", func(t *testing.T) {
				_, err := registry.DeregisterAgent(ctx, &registrypb.DeregisterAgentRequest{AgentId: bob.ID(), Reason: "takeover"}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, registrypb.RegistryService_DeregisterAgent_FullMethodName)
			})
			t.Run("shut down another agent", func(t *testing.T) {
				_, err := scheduler.ShutdownAgent(ctx, &schedulerpb.ShutdownAgentRequest{AgentId: bob.ID()}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, schedulerpb.SchedulerService_ShutdownAgent_FullMethodName)
			})
			t.Run("re-register an agent_id without its key", func(t *testing.T) {
				// Signed as mallory, naming bob: not the caller.
				_, err := registry.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: descriptor(bob.ID(), "bob", mallory.pub)}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, registrypb.RegistryService_RegisterAgent_FullMethodName)
				// Signed as bob with mallory's key: the signature does not verify with bob's key.
				forger := &testSigner{agent: bob.ID(), key: mallory.signer.key}
				conn := signedConn(t, sys, forger)
				_, err = registrypb.NewRegistryServiceClient(conn).RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: descriptor(bob.ID(), "bob", mallory.pub)}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.Unauthenticated, registrypb.RegistryService_RegisterAgent_FullMethodName)
				keys, err := sys.app.Store().Keys().ListAgentKeys(ctx, bob.ID())
				require.NoError(t, err)
				require.Len(t, keys, 1)
				assert.Equal(t, []byte(bob.pub), keys[0].PublicKey, "bob's key is unchanged")
			})
			t.Run("unsigned call", func(t *testing.T) {
				conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				require.NoError(t, err)
				defer conn.Close()
				_, err = registrypb.NewRegistryServiceClient(conn).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: bob.ID()}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.Unauthenticated, registrypb.RegistryService_Heartbeat_FullMethodName)
			})
			t.Run("replayed signed call", func(t *testing.T) {
				replayer := &testSigner{agent: alice.ID(), key: alice.signer.key}
				conn := signedConn(t, sys, replayer)
				reg := registrypb.NewRegistryServiceClient(conn)
				req := &registrypb.HeartbeatRequest{AgentId: alice.ID()}
				_, err := reg.Heartbeat(ctx, req)
				require.NoError(t, err)
				replayer.replay = replayer.last()
				_, err = reg.Heartbeat(ctx, req, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.Unauthenticated, registrypb.RegistryService_Heartbeat_FullMethodName)
				assert.Contains(t, status.Convert(err).Message(), "replayed")
			})
			t.Run("stale timestamp", func(t *testing.T) {
				stale := &testSigner{agent: alice.ID(), key: alice.signer.key, at: func() time.Time { return time.Now().Add(-time.Hour) }}
				_, err := registrypb.NewRegistryServiceClient(signedConn(t, sys, stale)).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: alice.ID()}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.Unauthenticated, registrypb.RegistryService_Heartbeat_FullMethodName)
			})
			t.Run("operator tasks are not an agent's", func(t *testing.T) {
				_, err := scheduler.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: bob.ID()}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, schedulerpb.SchedulerService_PurgeActivity_FullMethodName)
			})

			// Nothing changed for bob: still registered, still receiving, and its delivery
			// confirms and acknowledges as its own.
			rec, err := sys.app.Store().Registry().GetAgent(ctx, bob.ID())
			require.NoError(t, err)
			assert.NotEqual(t, commonpb.AgentState_SHUTTING_DOWN, rec.State)
			ok, err := got.Confirm(ctx)
			require.NoError(t, err)
			assert.True(t, ok)
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))

			// An operator may do what agents may not, and the audit names it.
			_, err = registrypb.NewRegistryServiceClient(mallory.Conn()).DeregisterAgent(operatorContext(), &registrypb.DeregisterAgentRequest{AgentId: bob.ID(), Reason: "operator"})
			require.NoError(t, err)
		})
	}
}

// signedConn is a bare connection whose calls s signs.
func signedConn(t *testing.T, sys *system, s *testSigner) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.dialOptions()...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestAuthFlowsInEveryMode: the canonical flow — register with a key, send, stream, confirm,
// acknowledge, heartbeat, deregister — works in off, optional and required mode, and in
// optional mode an unsigned agent still works while a signed one is held to its identity.
func TestAuthFlowsInEveryMode(t *testing.T) {
	for _, mode := range []auth.Mode{auth.Off, auth.Optional, auth.Required} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, "memory", mode))
			ctx := context.Background()
			a, b := dialSigned(t, sys, "a"), dialSigned(t, sys, "b")
			bIn := openInbox(t, b.Agent)
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)
			sent, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
			require.NoError(t, err)
			got := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))
			require.Eventually(t, func() bool {
				rec, err := sys.app.Store().Messages().GetMessage(ctx, sent.GetMessageId())
				return err == nil && rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
			}, 10*time.Second, 50*time.Millisecond)
			require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))

			// The audit names the proven principal of every action (§6.5).
			if mode != auth.Off {
				require.Eventually(t, func() bool {
					evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{MessageID: sent.GetMessageId(), Limit: 100})
					if err != nil {
						return false
					}
					for _, e := range evs {
						var d map[string]any
						if json.Unmarshal(e.Details, &d) == nil && d["principal"] == "agent:"+a.ID() {
							return true
						}
					}
					return false
				}, 10*time.Second, 50*time.Millisecond, "the admission of the message names agent:%s", a.ID())
			}

			forged := &commonpb.Envelope{MessageId: "m-" + uniq(t, "forged"), ProducerId: a.ID(), CorrelationId: "c-forged", SequenceNumber: 7,
				MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2}
			_, err = routerpb.NewRouterServiceClient(b.Conn()).SendMessage(ctx, &routerpb.SendMessageRequest{Msg: forged})
			if mode == auth.Off {
				assert.NoError(t, err, "off trusts every caller")
			} else {
				assert.Equal(t, codes.PermissionDenied, status.Code(err), "a signed caller is held to its identity in %s mode: %v", mode, err)
			}
			if mode == auth.Optional {
				// An unsigned agent still works in optional mode.
				u, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, "unsigned"))
				require.NoError(t, err)
				defer func() { _ = u.Close() }()
				require.NoError(t, u.Register(ctx, descriptor(u.ID(), "unsigned", nil)))
				_, err = u.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":2}`)})
				require.NoError(t, err)
			}
			require.NoError(t, b.Deregister(ctx, "done"))
		})
	}
}

// TestKeyRotationAndRevocation: an agent rotates its key by re-registering with the new one,
// signed with the old; both work during the overlap window, then only the new one (§23). An
// operator's revocation is refused by the frontend within a second.
func TestKeyRotationAndRevocation(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := authConfig(t, kind, auth.Required)
			cfg.KeyOverlap = 2 * time.Second
			sys := start(t, cfg)
			ctx := context.Background()
			a := dialSigned(t, sys, "rotating")
			old := &testSigner{agent: a.ID(), key: a.signer.key}
			oldReg := registrypb.NewRegistryServiceClient(signedConn(t, sys, old))

			pub2, priv2, err := ed25519.GenerateKey(nil)
			require.NoError(t, err)
			require.NoError(t, a.Register(ctx, descriptor(a.ID(), "rotating", pub2)), "re-registration with a new key, signed with the old one")
			a.signer.key = priv2
			require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil), "the new key works at once")
			_, err = oldReg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
			require.NoError(t, err, "the old key works during the overlap window")
			require.Eventually(t, func() bool {
				_, err := oldReg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
				return status.Code(err) == codes.Unauthenticated
			}, 10*time.Second, 100*time.Millisecond, "the old key expires after the overlap")
			require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))

			// Revocation: refused within a second, and audited with its key.
			n, err := sys.app.Store().Keys().RevokeAgentKey(ctx, a.ID(), auth.KeyID(auth.AlgorithmEd25519, pub2), time.Now(), authOperator, "compromised")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			revokedAt := time.Now()
			require.Eventually(t, func() bool {
				err := a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
				return status.Code(err) == codes.Unauthenticated
			}, 3*time.Second, 20*time.Millisecond)
			assert.Less(t, time.Since(revokedAt), 1500*time.Millisecond, "refused within about a second of the revocation")
			err = a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
			assert.Contains(t, status.Convert(err).Message(), "revoked")
		})
	}
}

// TestP256Agent: an agent with an ECDSA P-256 key (§6.2's alternative) registers, is
// verified and held to its identity like an Ed25519 one.
func TestP256Agent(t *testing.T) {
	sys := start(t, authConfig(t, "memory", auth.Required))
	ctx := context.Background()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pub, err := priv.PublicKey.Bytes()
	require.NoError(t, err)
	s := &testSigner{agent: uniq(t, "p256"), p256: priv}
	reg := registrypb.NewRegistryServiceClient(signedConn(t, sys, s))
	resp, err := reg.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: descriptor(s.agent, "p256", pub)})
	require.NoError(t, err)
	require.True(t, resp.GetAccepted(), resp.GetReason())
	_, err = reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: s.agent})
	require.NoError(t, err)
	keys, err := sys.app.Store().Keys().ListAgentKeys(ctx, s.agent)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Equal(t, auth.AlgorithmP256, keys[0].Algorithm)

	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	forged := registrypb.NewRegistryServiceClient(signedConn(t, sys, &testSigner{agent: s.agent, p256: other}))
	_, err = forged.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: s.agent})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	_, err = reg.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: descriptor(s.agent, "p256", pub[:40])})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "a key of neither algorithm's length: %v", err)
}

// TestACLOnMessageTypes: with an ACL file (§6.3), a data message whose producer may not send
// its type, or whose recipient may not receive it, is rejected with permission_denied,
// NACKed and recorded — never delivered; an allowed one flows.
func TestACLOnMessageTypes(t *testing.T) {
	cfg := authConfig(t, "memory", auth.Required)
	cfg.ACLFile = filepath.Join(t.TempDir(), "acl.json")
	require.NoError(t, os.WriteFile(cfg.ACLFile, []byte(`{
  "version": 1,
  "default": "deny",
  "rules": [
    {"name": "no negotiation traffic to auditors", "effect": "deny", "agents": ["*auditor*"], "receive": ["NEGOTIATION"]},
    {"name": "everyone sends and receives data and notifications", "effect": "allow", "agents": ["*"],
     "send": ["DATA", "NOTIFICATION", "ACKNOWLEDGEMENT", "NEGOTIATION"], "receive": ["*"]}
  ]
}`), 0o600))
	sys := start(t, cfg)
	ctx := context.Background()
	a, auditor := dialSigned(t, sys, "a"), dialSigned(t, sys, "auditor")
	in, aIn := openInbox(t, auditor.Agent), openInbox(t, a.Agent)
	waitState(t, sys, auditor.ID(), commonpb.AgentState_RUNNABLE)

	ok, err := a.Send(ctx, sdk.Message{To: auditor.ID(), Payload: []byte(`{"n":1}`)})
	require.NoError(t, err)
	in.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == ok.GetMessageId() })

	refusedMsg, err := a.Send(ctx, sdk.Message{To: auditor.ID(), Type: commonpb.MessageType_NEGOTIATION, Payload: []byte(`{"offer":1}`)})
	require.Error(t, err)
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, sdk.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "no negotiation traffic to auditors")
	nack := aIn.next(t, true, ackFor(refusedMsg.GetMessageId(), commonpb.AckStage_REJECTED))
	np, _ := nack.AckPayload()
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, np.ErrorCode, "the producer is NACKed with the ACL's refusal")

	_, err = a.Send(ctx, sdk.Message{To: auditor.ID(), Type: commonpb.MessageType_HITL_INVOCATION, Payload: []byte(`{}`)})
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, sdk.CodeOf(err), "a type no rule allows falls to the default, deny: %v", err)
}

// TestNodeClientSignsForTheServer: a client written without Go — Node.js with only its
// built-in http2 and crypto, from docs/signing.md and the published vectors — makes a signed
// call that the real frontend accepts in required mode; its tampered twin and a call signed
// with another key are refused.
func TestNodeClientSignsForTheServer(t *testing.T) {
	sys := start(t, authConfig(t, "memory", auth.Required))
	ctx := context.Background()
	seed := make([]byte, ed25519.SeedSize)
	_, err := rand.Read(seed)
	require.NoError(t, err)
	priv := ed25519.NewKeyFromSeed(seed)
	id := uniq(t, "node")
	a, err := sdk.Dial(sys.app.GRPCAddr(), id, sdk.WithSigningKey(priv))
	require.NoError(t, err)
	defer func() { _ = a.Close() }()
	require.NoError(t, a.Register(ctx, descriptor(id, "node", nil)), "the SDK registers the public key of its signing key")

	st, err := runNodeSignedCall(t, sys.app.GRPCAddr(), hex.EncodeToString(seed), id, "")
	require.NoError(t, err)
	assert.Equal(t, "0", st, "the Node client's signed Heartbeat is accepted")
	rec, err := sys.app.Store().Registry().GetAgent(ctx, id)
	require.NoError(t, err)
	assert.False(t, rec.LastHeartbeat.IsZero(), "and recorded")

	st, err = runNodeSignedCall(t, sys.app.GRPCAddr(), hex.EncodeToString(seed), id, "", "--tamper-body")
	require.NoError(t, err)
	assert.Equal(t, "16", st, "a body changed after signing is UNAUTHENTICATED")
	other := make([]byte, ed25519.SeedSize)
	_, err = rand.Read(other)
	require.NoError(t, err)
	st, err = runNodeSignedCall(t, sys.app.GRPCAddr(), hex.EncodeToString(other), id, "")
	require.NoError(t, err)
	assert.Equal(t, "16", st, "another key is UNAUTHENTICATED")
}

// TestTwoFrontendsShareIdentity: identity holds across frontends sharing one PostgreSQL store
// — a Heartbeat replayed to the other frontend is refused (the nonce is shared), and a key
// revoked through one frontend's KeyAdminService is refused by the other within a second.
func TestTwoFrontendsShareIdentity(t *testing.T) {
	cfg := authConfig(t, "postgres", auth.Required)
	sys := start(t, cfg)
	cfg2 := cfg
	cfg2.GRPCAddr, cfg2.HTTPAddr = "127.0.0.1:0", ""
	ctx0, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, err := app.Start(ctx0, cfg2, app.Roles{Server: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(second.Stop)
	sys2 := &system{app: second, cfg: cfg2}
	ctx := context.Background()

	a := dialSigned(t, sys, "shared")
	replayer := &testSigner{agent: a.ID(), key: a.signer.key}
	_, err = registrypb.NewRegistryServiceClient(signedConn(t, sys, replayer)).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
	require.NoError(t, err)
	replayer.replay = replayer.last()
	_, err = registrypb.NewRegistryServiceClient(signedConn(t, sys2, replayer)).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "a replay to the other frontend: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "replayed")

	on2 := registrypb.NewRegistryServiceClient(signedConn(t, sys2, &testSigner{agent: a.ID(), key: a.signer.key}))
	_, err = on2.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
	require.NoError(t, err, "the agent's key works on the second frontend (and is now cached there)")

	admin := keyadminpb.NewKeyAdminServiceClient(signedConn(t, sys, &testSigner{agent: a.ID(), key: a.signer.key}))
	_, err = admin.RevokeKey(operatorContext(), &keyadminpb.RevokeKeyRequest{AgentId: a.ID(), Reason: "test: compromised"})
	require.NoError(t, err)
	revoked := time.Now()
	require.Eventually(t, func() bool {
		_, err := on2.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.ID()})
		return status.Code(err) == codes.Unauthenticated
	}, 5*time.Second, 20*time.Millisecond, "the second frontend refuses the revoked key")
	assert.Less(t, time.Since(revoked), 1500*time.Millisecond, "within about a second of the revocation")
}
