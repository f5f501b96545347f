package frontend

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

func newKeyAdminTestService(t *testing.T) (*keyAdminService, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	s := &Server{store: st, sink: audit.New(log, st.Audit()), log: log, cfg: Config{HITLPolicy: hitl.Policy{
		Operators: []hitl.Operator{{Name: "olga", TokenSHA256: hitl.HashToken(dlqTestToken)}},
	}}}
	return &keyAdminService{s: s}, st
}

// seedKeys gives alice two keys and bob one, and returns alice's key ids.
func seedKeys(t *testing.T, st store.Store) []string {
	t.Helper()
	var ids []string
	base := time.Now().Add(-time.Hour)
	for i, k := range []struct{ agent, pub string }{{"alice", "alice-key-1"}, {"alice", "alice-key-2"}, {"bob", "bob-key-1"}} {
		pub := []byte(k.pub)
		key := store.AgentKey{AgentID: k.agent, KeyID: auth.KeyID(auth.AlgorithmEd25519, pub), Algorithm: auth.AlgorithmEd25519,
			PublicKey: pub, AddedAt: base.Add(time.Duration(i) * time.Minute)}
		require.NoError(t, st.Keys().AddAgentKey(t.Context(), key, false))
		if k.agent == "alice" {
			ids = append(ids, key.KeyID)
		}
	}
	return ids
}

func keyAdminIDs(keys []*keyadminpb.AgentKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.GetAgentId() + "/" + k.GetKeyId()
	}
	return out
}

// TestKeyAdminRefusesNonOperators: without an operator — no token, a wrong token, or a call
// proven to come from an agent — nothing is listed and nothing is revoked.
func TestKeyAdminRefusesNonOperators(t *testing.T) {
	k, st := newKeyAdminTestService(t)
	alice := seedKeys(t, st)
	agent := auth.WithPrincipal(t.Context(), auth.Principal{Agent: "alice", KeyID: alice[0]})
	for name, c := range map[string]struct {
		ctx  context.Context
		want codes.Code
	}{
		"no token":                {t.Context(), codes.Unauthenticated},
		"bad token":               {operatorCtx(t, "wrong"), codes.Unauthenticated},
		"proven agent":            {agent, codes.PermissionDenied},
		"proven agent, bad token": {metadata.NewIncomingContext(agent, metadata.Pairs("authorization", "Bearer wrong")), codes.PermissionDenied},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := k.ListKeys(c.ctx, &keyadminpb.ListKeysRequest{})
			requireCode(t, c.want, err)
			_, err = k.RevokeKey(c.ctx, &keyadminpb.RevokeKeyRequest{AgentId: "alice", Reason: "x"})
			requireCode(t, c.want, err)
		})
	}
	for _, key := range mustList(t, st, "") {
		require.True(t, key.RevokedAt.IsZero(), "%s was revoked", key.KeyID)
	}
}

func mustList(t *testing.T, st store.Store, agentID string) []store.AgentKey {
	t.Helper()
	keys, err := st.Keys().ListAgentKeys(t.Context(), agentID)
	require.NoError(t, err)
	return keys
}

func TestKeyAdminList(t *testing.T) {
	k, st := newKeyAdminTestService(t)
	alice := seedKeys(t, st)
	bob := mustList(t, st, "bob")[0]

	resp, err := k.ListKeys(operatorCtx(t, dlqTestToken), &keyadminpb.ListKeysRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"alice/" + alice[0], "alice/" + alice[1], "bob/" + bob.KeyID}, keyAdminIDs(resp.GetKeys()))
	got := resp.GetKeys()[2]
	require.Equal(t, bob.PublicKey, got.GetPublicKey())
	require.Equal(t, auth.AlgorithmEd25519, got.GetAlgorithm())
	require.True(t, got.GetAddedAt().AsTime().Equal(bob.AddedAt))
	require.Nil(t, got.GetNotAfter())
	require.Nil(t, got.GetRevokedAt())
	require.True(t, got.GetValid())

	// An operator proven by the interceptor needs no token.
	ctx := auth.WithPrincipal(t.Context(), auth.Principal{Operator: "olga"})
	resp, err = k.ListKeys(ctx, &keyadminpb.ListKeysRequest{AgentId: "alice"})
	require.NoError(t, err)
	require.Equal(t, []string{"alice/" + alice[0], "alice/" + alice[1]}, keyAdminIDs(resp.GetKeys()))

	resp, err = k.ListKeys(ctx, &keyadminpb.ListKeysRequest{AgentId: "carol"})
	require.NoError(t, err)
	require.Empty(t, resp.GetKeys())
}

func TestKeyAdminRevoke(t *testing.T) {
	k, st := newKeyAdminTestService(t)
	alice := seedKeys(t, st)
	ctx := operatorCtx(t, dlqTestToken)
	g, err := st.Keys().KeysGeneration(t.Context())
	require.NoError(t, err)

	// Bad requests change nothing.
	for _, req := range []*keyadminpb.RevokeKeyRequest{
		{Reason: "no agent"},
		{AgentId: "alice", KeyId: alice[0]},
		{AgentId: "alice", KeyId: alice[0], Reason: "  "},
		{AgentId: "alice", KeyId: alice[0], Reason: "bell\a"},
	} {
		_, err := k.RevokeKey(ctx, req)
		requireCode(t, codes.InvalidArgument, err)
	}
	for _, req := range []*keyadminpb.RevokeKeyRequest{
		{AgentId: "carol", Reason: "unknown agent"},
		{AgentId: "alice", KeyId: "ed25519:0000000000000000", Reason: "unknown key"},
	} {
		_, err := k.RevokeKey(ctx, req)
		requireCode(t, codes.NotFound, err)
	}
	g2, err := st.Keys().KeysGeneration(t.Context())
	require.NoError(t, err)
	require.Equal(t, g, g2, "nothing changed")

	// One key: recorded with the operator and the reason, and audited.
	resp, err := k.RevokeKey(ctx, &keyadminpb.RevokeKeyRequest{AgentId: "alice", KeyId: alice[0], Reason: "laptop stolen"})
	require.NoError(t, err)
	require.EqualValues(t, 1, resp.GetRevoked())
	require.Equal(t, []string{"alice/" + alice[0], "alice/" + alice[1]}, keyAdminIDs(resp.GetKeys()))
	require.False(t, resp.GetKeys()[0].GetValid())
	require.Equal(t, "olga", resp.GetKeys()[0].GetRevokedBy())
	require.Equal(t, "laptop stolen", resp.GetKeys()[0].GetRevokeReason())
	require.NotNil(t, resp.GetKeys()[0].GetRevokedAt())
	require.True(t, resp.GetKeys()[1].GetValid())
	stored := mustList(t, st, "alice")[0]
	require.Equal(t, "olga", stored.RevokedBy)
	require.False(t, stored.ValidAt(time.Now()))

	// Again: nothing more is revoked, nothing more audited.
	resp, err = k.RevokeKey(ctx, &keyadminpb.RevokeKeyRequest{AgentId: "alice", KeyId: alice[0], Reason: "again"})
	require.NoError(t, err)
	require.Zero(t, resp.GetRevoked())

	// All of alice's keys, by an operator the interceptor proved; bob keeps his.
	proven := auth.WithPrincipal(t.Context(), auth.Principal{Operator: "pete"})
	resp, err = k.RevokeKey(proven, &keyadminpb.RevokeKeyRequest{AgentId: "alice", Reason: "compromised host"})
	require.NoError(t, err)
	require.EqualValues(t, 1, resp.GetRevoked())
	require.Equal(t, "pete", mustList(t, st, "alice")[1].RevokedBy)
	require.True(t, mustList(t, st, "bob")[0].RevokedAt.IsZero())

	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "auth.key_revoked"})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	var details map[string]any
	require.Equal(t, "olga", evs[0].Actor)
	require.Equal(t, "alice", evs[0].AgentID)
	require.NoError(t, json.Unmarshal(evs[0].Details, &details))
	require.Equal(t, alice[0], details["key_id"])
	require.Equal(t, []any{alice[0]}, details["key_ids"])
	require.Equal(t, "laptop stolen", details["reason"])
	require.Equal(t, "cli", details["via"])
	require.Equal(t, "pete", evs[1].Actor)
	details = nil
	require.NoError(t, json.Unmarshal(evs[1].Details, &details))
	require.Empty(t, details["key_id"], "all keys")
	require.Equal(t, []any{alice[1]}, details["key_ids"])
	require.Equal(t, "grpc", details["via"])
}
