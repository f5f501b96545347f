package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/proto/auditadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// TestHLCOrdersACausalChainAcrossSkewedFrontends: two frontends share one PostgreSQL store,
// the second's clock 2 s behind the first's (injected). Agent A talks through the first, B
// through the second; the SDK sends on each reply the highest HLC its agent received, so the
// reply follows the message it answers, as §4's example chain does. Every envelope delivered carries an HLC after the one before it in the chain,
// although the second frontend's wall clock is behind the first's stamps; the audit log read
// through AuditAdminService (and `sw4rm audit`) ordered by HLC gives the chain's admissions
// in causal order, while ordered by time some row of the second frontend comes before what
// caused it. Only operators read the audit log.
func TestHLCOrdersACausalChainAcrossSkewedFrontends(t *testing.T) {
	const skew = 2 * time.Second
	cfg := hitlConfig(t, "postgres")
	sys1 := start(t, cfg)
	cfg2 := cfg
	cfg2.GRPCAddr, cfg2.HTTPAddr = "127.0.0.1:0", ""
	cfg2.PhysicalClock = func() time.Time { return time.Now().Add(-skew) }
	ctx0, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, err := app.Start(ctx0, cfg2, app.Roles{Server: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(second.Stop)
	sys2 := &system{app: second, cfg: cfg2}
	ctx := context.Background()

	a := dialAgent(t, sys1, "a")
	aIn := openInbox(t, a)
	waitState(t, sys1, a.ID(), commonpb.AgentState_RUNNABLE)
	b := dialAgent(t, sys2, "b")
	bIn := openInbox(t, b)
	waitState(t, sys1, b.ID(), commonpb.AgentState_RUNNABLE)

	corr := uuid.NewString()
	// send sends one step of the chain from one agent to the other and returns the envelope
	// as the recipient's stream delivers it.
	send := func(from *sdk.Agent, to *sdk.Agent, toIn *inbox) *commonpb.Envelope {
		t.Helper()
		sent, err := from.Send(ctx, sdk.Message{To: to.ID(), CorrelationID: corr, Payload: []byte(`{}`)})
		require.NoError(t, err)
		env := sent
		got := toIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == env.GetMessageId() })
		require.NoError(t, to.Ack(ctx, got.Envelope, commonpb.AckStage_RECEIVED, 0, ""))
		return got.Envelope
	}
	var chain []*commonpb.Envelope
	for i := range 4 {
		from, to, toIn := a, b, bIn // A → B through frontend 1, the 2 s ahead one
		if i%2 == 1 {
			from, to, toIn = b, a, aIn // B → A through frontend 2, the 2 s behind one
		}
		if i > 0 {
			require.GreaterOrEqual(t, from.LastHLC(), chain[i-1].GetHlcTimestamp(), "the sender has the HLC of what it answers")
		}
		chain = append(chain, send(from, to, toIn))
	}
	var prev hlc.Timestamp
	for i, env := range chain {
		ts, err := hlc.Parse(env.GetHlcTimestamp())
		require.NoError(t, err, "message %d carries an HLC", i)
		require.True(t, prev.Before(ts), "message %d: %s does not follow %s", i, ts, prev)
		prev = ts
	}

	admin := auditadminpb.NewAuditAdminServiceClient(dialRaw(t, sys1))
	octx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
	list := func(order auditadminpb.AuditOrder) []*auditadminpb.AuditEvent {
		t.Helper()
		resp, err := admin.ListAuditEvents(octx, &auditadminpb.ListAuditEventsRequest{CorrelationId: corr, Order: order})
		require.NoError(t, err)
		return resp.GetEvents()
	}
	byHLC := list(auditadminpb.AuditOrder_AUDIT_ORDER_HLC)
	var admitted []string
	for i, e := range byHLC {
		require.NotEmpty(t, e.GetHlc(), "event %s carries an HLC", e.GetType())
		if i > 0 {
			require.LessOrEqual(t, byHLC[i-1].GetHlc(), e.GetHlc())
		}
		if e.GetType() == "message.admitted" {
			admitted = append(admitted, e.GetMessageId())
		}
	}
	want := make([]string, len(chain))
	for i, env := range chain {
		want[i] = env.GetMessageId()
	}
	require.Equal(t, want, admitted, "ordered by HLC, the admissions follow the causal chain")

	// Ordered by wall-clock time, frontend 2's rows (B's ACKs, its admissions' transitions)
	// fall before rows of frontend 1 that caused them.
	byTime := list(auditadminpb.AuditOrder_AUDIT_ORDER_TIME)
	inversions := 0
	for i := 1; i < len(byTime); i++ {
		if byTime[i].GetHlc() < byTime[i-1].GetHlc() {
			inversions++
		}
	}
	assert.Positive(t, inversions, "the skewed clock shows in the time order")

	// The CLI reads the same, as an operator.
	out, err := runCLIArgs(t, sys1, "alice-token", "audit", "--server", sys1.app.GRPCAddr(), "--correlation", corr, "--type", "message.admitted")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1+len(chain), out)
	for i, id := range want {
		assert.Contains(t, lines[1+i], id, "line %d of\n%s", i+1, out)
	}

	// Only operators: no token, or an agent, is refused.
	_, err = admin.ListAuditEvents(ctx, &auditadminpb.ListAuditEventsRequest{CorrelationId: corr})
	require.Contains(t, []codes.Code{codes.Unauthenticated, codes.PermissionDenied}, status.Code(err), "no token: %v", err)
	_, err = auditadminpb.NewAuditAdminServiceClient(a.Conn()).ListAuditEvents(ctx, &auditadminpb.ListAuditEventsRequest{CorrelationId: corr})
	require.Contains(t, []codes.Code{codes.Unauthenticated, codes.PermissionDenied}, status.Code(err), "an agent: %v", err)
	_, err = admin.ListAuditEvents(octx, &auditadminpb.ListAuditEventsRequest{
		Since: timestamppb.New(time.Now()), Until: timestamppb.New(time.Now().Add(-time.Hour))})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "until before since: %v", err)
}
