package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// allowedRows returns the auth.allowed audit rows, with their details decoded.
func allowedRows(t *testing.T, sys *system) []map[string]any {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{TypePrefix: "auth.allowed", Limit: 1000})
	require.NoError(t, err)
	rows := make([]map[string]any, 0, len(evs))
	for _, e := range evs {
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Details, &d))
		d["actor"], d["agent_id"] = e.Actor, e.AgentID
		rows = append(rows, d)
	}
	return rows
}

// rowsOf returns the rows of method.
func rowsOf(rows []map[string]any, method string) []map[string]any {
	var out []map[string]any
	for _, r := range rows {
		if r["method"] == method {
			out = append(out, r)
		}
	}
	return out
}

// TestAllowedCallsAudited: with SW4RM_AUDIT_ACCESS=all every allowed call is written to the
// audit log as auth.allowed naming its method, its proven principal (the agent and the key
// that signed it, or the operator) and the mode — a stream once — so every access decision
// is logged (§6.5); by default only refusals are, and an allowed call leaves no row. Both
// stores, required mode, over gRPC.
func TestAllowedCallsAudited(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, access := range []frontend.AccessAudit{frontend.AuditRefused, frontend.AuditAll} {
				t.Run(access.String(), func(t *testing.T) {
					cfg := authConfig(t, kind, auth.Required)
					cfg.AuditAccess = access
					sys := start(t, cfg)
					ctx := context.Background()

					alice, bob := dialSigned(t, sys, "alice"), dialSigned(t, sys, "bob")
					bobIn := openInbox(t, bob.Agent)
					waitState(t, sys, bob.ID(), commonpb.AgentState_RUNNABLE)
					sent, err := alice.Send(ctx, sdk.Message{To: bob.ID(), Payload: []byte(`{"audited":true}`)})
					require.NoError(t, err)
					bobIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })

					// An operator's read, which changes nothing and so leaves no other row.
					conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
					require.NoError(t, err)
					t.Cleanup(func() { _ = conn.Close() })
					_, err = dlqadminpb.NewDlqAdminServiceClient(conn).ListDeadLetters(operatorContext(), &dlqadminpb.ListDeadLettersRequest{})
					require.NoError(t, err)

					// A refusal last: the audit writer keeps the order of its rows, so once the
					// refusal's row is in, every allowed call's row before it is too.
					_, err = registrypb.NewRegistryServiceClient(alice.Conn()).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: bob.ID()})
					refused(t, sys, err, nil, codes.PermissionDenied, registrypb.RegistryService_Heartbeat_FullMethodName)

					rows := allowedRows(t, sys)
					if access == frontend.AuditRefused {
						assert.Empty(t, rows, "by default an allowed call leaves no access record")
						return
					}
					sends := rowsOf(rows, routerpb.RouterService_SendMessage_FullMethodName)
					require.Len(t, sends, 1, "one row for alice's one SendMessage")
					assert.Equal(t, map[string]any{"method": routerpb.RouterService_SendMessage_FullMethodName, "mode": "required",
						"principal": "agent:" + alice.ID(), "key_id": auth.KeyID("ed25519", alice.pub),
						"actor": "agent:" + alice.ID(), "agent_id": alice.ID()}, sends[0])

					streams := rowsOf(rows, routerpb.RouterService_StreamIncoming_FullMethodName)
					require.NotEmpty(t, streams, "bob's inbox stream")
					assert.Equal(t, "agent:"+bob.ID(), streams[0]["principal"])
					assert.Equal(t, auth.KeyID("ed25519", bob.pub), streams[0]["key_id"])

					reads := rowsOf(rows, dlqadminpb.DlqAdminService_ListDeadLetters_FullMethodName)
					require.Len(t, reads, 1)
					assert.Equal(t, "operator:"+authOperator, reads[0]["principal"])
					assert.Equal(t, "required", reads[0]["mode"])

					assert.Empty(t, rowsOf(rows, registrypb.RegistryService_Heartbeat_FullMethodName), "the refused heartbeat is no auth.allowed row")
					principals := map[any]bool{}
					for _, r := range rowsOf(rows, registrypb.RegistryService_RegisterAgent_FullMethodName) {
						principals[r["principal"]] = true
					}
					assert.True(t, principals["agent:"+alice.ID()] && principals["agent:"+bob.ID()], "the registrations, each proven by the key it registers: %v", principals)
				})
			}
		})
	}
}

// TestAllowedCallsAuditedWithAuthOff: with authentication off nothing is proven, and with
// SW4RM_AUDIT_ACCESS=all each call is still recorded, anonymous, with mode off.
func TestAllowedCallsAuditedWithAuthOff(t *testing.T) {
	cfg := newConfig(t, "memory")
	cfg.AuditAccess = frontend.AuditAll
	sys := start(t, cfg)
	a, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, "plain"))
	require.NoError(t, err)
	defer func() { _ = a.Close() }()
	require.NoError(t, a.Register(context.Background(), descriptor(a.ID(), "plain", nil)))
	require.Eventually(t, func() bool {
		return len(rowsOf(allowedRows(t, sys), registrypb.RegistryService_RegisterAgent_FullMethodName)) == 1
	}, 10*time.Second, 50*time.Millisecond, "the registration is recorded")
	row := rowsOf(allowedRows(t, sys), registrypb.RegistryService_RegisterAgent_FullMethodName)[0]
	assert.Equal(t, "anonymous", row["principal"])
	assert.Equal(t, "off", row["mode"])
}
