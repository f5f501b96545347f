package protocol_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

func validHandoff() *handoffpb.HandoffRequest {
	return &handoffpb.HandoffRequest{
		RequestId: "h-1", FromAgent: "triage", ToAgent: "billing", Reason: "billing question",
		ContextSnapshot: []byte(`{"ticket":42}`), Priority: 0, Timeout: durationpb.New(time.Minute),
	}
}

func TestValidateHandoffRequest(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*handoffpb.HandoffRequest)
		ct     string
		code   commonpb.ErrorCode // 0 = valid
		msg    string
	}{
		{"valid", func(*handoffpb.HandoffRequest) {}, "", 0, ""},
		{"routed by capability", func(r *handoffpb.HandoffRequest) { r.ToAgent, r.CapabilitiesRequired = "", []string{"billing"} }, "", 0, ""},
		{"content type with parameters", func(*handoffpb.HandoffRequest) {}, "text/plain; charset=utf-8", 0, ""},
		{"protobuf context", func(*handoffpb.HandoffRequest) {}, "application/protobuf", 0, ""},
		{"highest priority", func(r *handoffpb.HandoffRequest) { r.Priority = -19 }, "", 0, ""},
		{"depth below max", func(r *handoffpb.HandoffRequest) {
			r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 2, MaxDelegationDepth: 3}
		}, "", 0, ""},
		{"depth without max", func(r *handoffpb.HandoffRequest) { r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 9} }, "", 0, ""},
		{"24h timeout", func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(24 * time.Hour) }, "", 0, ""},

		{"no request_id", func(r *handoffpb.HandoffRequest) { r.RequestId = "" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required"},
		{"request_id with a slash", func(r *handoffpb.HandoffRequest) { r.RequestId = "a/b" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "request_id"},
		{"request_id too long", func(r *handoffpb.HandoffRequest) { r.RequestId = strings.Repeat("x", 129) }, "", commonpb.ErrorCode_VALIDATION_ERROR, "request_id"},
		{"no from_agent", func(r *handoffpb.HandoffRequest) { r.FromAgent = "" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "from_agent is required"},
		{"bad from_agent", func(r *handoffpb.HandoffRequest) { r.FromAgent = "a b" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "from_agent"},
		{"neither target nor capabilities", func(r *handoffpb.HandoffRequest) { r.ToAgent = "" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "to_agent or capabilities_required"},
		{"empty capability", func(r *handoffpb.HandoffRequest) { r.CapabilitiesRequired = []string{""} }, "", commonpb.ErrorCode_VALIDATION_ERROR, "empty entry"},
		{"to itself", func(r *handoffpb.HandoffRequest) { r.ToAgent = r.FromAgent }, "", commonpb.ErrorCode_VALIDATION_ERROR, "is the originator"},
		{"bad to_agent", func(r *handoffpb.HandoffRequest) { r.ToAgent = "-x" }, "", commonpb.ErrorCode_VALIDATION_ERROR, "to_agent"},
		{"priority too high", func(r *handoffpb.HandoffRequest) { r.Priority = -20 }, "", commonpb.ErrorCode_VALIDATION_ERROR, "priority -20"},
		{"priority too low", func(r *handoffpb.HandoffRequest) { r.Priority = 21 }, "", commonpb.ErrorCode_VALIDATION_ERROR, "priority 21"},
		{"no timeout", func(r *handoffpb.HandoffRequest) { r.Timeout = nil }, "", commonpb.ErrorCode_VALIDATION_ERROR, "timeout is required"},
		{"zero timeout", func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(0) }, "", commonpb.ErrorCode_VALIDATION_ERROR, "must be positive"},
		{"negative timeout", func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(-time.Second) }, "", commonpb.ErrorCode_VALIDATION_ERROR, "must be positive"},
		{"timeout over a day", func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(25 * time.Hour) }, "", commonpb.ErrorCode_VALIDATION_ERROR, "at most 24h"},
		{"depth reaches max", func(r *handoffpb.HandoffRequest) {
			r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 3, MaxDelegationDepth: 3}
		}, "", commonpb.ErrorCode_VALIDATION_ERROR, "delegation depth 3 reaches max 3"},
		{"negative multiplier", func(r *handoffpb.HandoffRequest) {
			r.DelegationPolicy = &handoffpb.SwarmDelegationPolicy{BackoffMultiplier: -1}
		}, "", commonpb.ErrorCode_VALIDATION_ERROR, "backoff_multiplier"},
		{"content type outside 004", func(*handoffpb.HandoffRequest) {}, "image/png", commonpb.ErrorCode_VALIDATION_ERROR, "004 item 8"},
		{"content type not MIME", func(*handoffpb.HandoffRequest) {}, "json", commonpb.ErrorCode_VALIDATION_ERROR, "004 item 8"},
		{"context too large", func(r *handoffpb.HandoffRequest) { r.ContextSnapshot = make([]byte, protocol.DefaultMaxPayloadBytes+1) }, "", commonpb.ErrorCode_OVERSIZE_PAYLOAD, "exceeds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := validHandoff()
			c.mutate(r)
			err := protocol.ValidateHandoffRequest(r, c.ct)
			if c.code == 0 {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			assert.Equal(t, c.code, err.Code)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
	require.NotNil(t, protocol.ValidateHandoffRequest(nil, ""))
}

func TestValidateHandoffRequestConfiguredLimit(t *testing.T) {
	r := validHandoff()
	r.ContextSnapshot = make([]byte, 100)
	require.Nil(t, protocol.ValidateHandoffRequestLimits(r, "", protocol.Limits{MaxPayloadBytes: 100}))
	err := protocol.ValidateHandoffRequestLimits(r, "", protocol.Limits{MaxPayloadBytes: 99})
	require.NotNil(t, err)
	assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, err.Code)
}

func TestHandoffContentTypeDefault(t *testing.T) {
	assert.Equal(t, "application/json", protocol.HandoffContentType(""))
	assert.Equal(t, "text/plain", protocol.HandoffContentType("text/plain"))
}

func TestRankCandidates(t *testing.T) {
	runnable := commonpb.AgentState_RUNNABLE
	agents := []protocol.HandoffCandidate{
		{AgentID: "triage", State: runnable, Capabilities: []string{"billing", "refunds"}},
		{AgentID: "busy", State: runnable, Capabilities: []string{"billing", "refunds"}, Load: 5},
		{AgentID: "b2", State: runnable, Capabilities: []string{"billing", "refunds"}, Load: 1, OpenDelegations: 1},
		{AgentID: "b1", State: runnable, Capabilities: []string{"refunds", "billing", "x"}, Load: 2},
		{AgentID: "asleep", State: commonpb.AgentState_SUSPENDED, Capabilities: []string{"billing", "refunds"}},
		{AgentID: "partial", State: runnable, Capabilities: []string{"billing"}},
		{AgentID: "images", State: runnable, Capabilities: []string{"billing", "refunds"}, Modalities: []string{"image/*"}},
		{AgentID: "full", State: runnable, Capabilities: []string{"billing", "refunds"}, MaxConcurrentDelegations: 2, OpenDelegations: 2},
		{AgentID: "roomy", State: runnable, Capabilities: []string{"billing", "refunds"}, MaxConcurrentDelegations: 2, OpenDelegations: 1, Load: 9},
		{AgentID: "refused", State: runnable, Capabilities: []string{"billing", "refunds"}},
	}
	got, reason := protocol.RankCandidates(agents, []string{"billing", "refunds"}, "application/json", map[string]bool{"triage": true, "refused": true})
	var ids []string
	for _, c := range got {
		ids = append(ids, c.AgentID)
	}
	// b1 and b2 both weigh 2: agent_id breaks the tie.
	assert.Equal(t, []string{"b1", "b2", "busy", "roomy"}, ids)
	assert.Equal(t, "least loaded of 4 capable: load 2", reason)

	// Nothing needed: every RUNNABLE agent not excluded qualifies.
	got, _ = protocol.RankCandidates(agents, nil, "text/plain", nil)
	assert.Len(t, got, 7)

	got, reason = protocol.RankCandidates(agents, []string{"payroll"}, "application/json", map[string]bool{"triage": true})
	assert.Empty(t, got)
	assert.Contains(t, reason, "no capable agent left among 10 registered")
	assert.Contains(t, reason, "1 excluded, 1 not RUNNABLE, 8 without [payroll]")
}

func TestNextOverloadBackoff(t *testing.T) {
	cases := []struct {
		name  string
		p     protocol.HandoffPolicy
		retry int
		want  time.Duration
	}{
		{"defaults first", protocol.HandoffPolicy{}, 0, time.Second},
		{"defaults double", protocol.HandoffPolicy{}, 2, 4 * time.Second},
		{"defaults cap", protocol.HandoffPolicy{}, 5, 30 * time.Second},
		{"huge retry does not overflow", protocol.HandoffPolicy{}, 10000, 30 * time.Second},
		{"policy", protocol.HandoffPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: time.Second}, 2, 900 * time.Millisecond},
		{"policy cap", protocol.HandoffPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: time.Second}, 3, time.Second},
		{"constant", protocol.HandoffPolicy{InitialBackoff: 200 * time.Millisecond, Multiplier: 1}, 4, 200 * time.Millisecond},
		{"shrinking multiplier is constant", protocol.HandoffPolicy{InitialBackoff: 200 * time.Millisecond, Multiplier: 0.5}, 4, 200 * time.Millisecond},
		{"initial above cap", protocol.HandoffPolicy{InitialBackoff: time.Minute, MaxBackoff: time.Second}, 0, time.Second},
		{"negative retry is the first", protocol.HandoffPolicy{}, -1, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, protocol.NextOverloadBackoff(c.p, c.retry))
		})
	}
	assert.Equal(t, 7*time.Second, protocol.OverloadWait(protocol.HandoffPolicy{}, 0, 7000), "a longer retry_after wins")
	assert.Equal(t, 2*time.Second, protocol.OverloadWait(protocol.HandoffPolicy{}, 1, 500), "a shorter one does not")
}

func TestHandoffPolicyDefaults(t *testing.T) {
	assert.Equal(t, 3, protocol.OverloadRetries(protocol.HandoffPolicy{}))
	assert.Equal(t, 0, protocol.OverloadRetries(protocol.HandoffPolicy{AllowSpillover: true}), "a policy that names no retries wants none")
	assert.Equal(t, 5, protocol.OverloadRetries(protocol.HandoffPolicy{MaxRetriesOnOverloaded: 5}))
	assert.Equal(t, 2, protocol.MaxRedirectsOf(protocol.HandoffPolicy{}), "the published SDKs' bound")
	assert.Equal(t, 1, protocol.MaxRedirectsOf(protocol.HandoffPolicy{MaxRedirects: 1}))

	p := protocol.HandoffPolicyFromProto(&handoffpb.SwarmDelegationPolicy{MaxRetriesOnOverloaded: 2, InitialBackoffMs: 250, BackoffMultiplier: 1.5,
		MaxBackoffMs: 4000, AllowSpilloverRouting: true, MaxRedirects: 4})
	assert.Equal(t, protocol.HandoffPolicy{MaxRetriesOnOverloaded: 2, InitialBackoff: 250 * time.Millisecond, Multiplier: 1.5,
		MaxBackoff: 4 * time.Second, AllowSpillover: true, MaxRedirects: 4}, p)
	assert.Equal(t, protocol.HandoffPolicy{}, protocol.HandoffPolicyFromProto(nil))
}

func TestHandoffTransitions(t *testing.T) {
	pending, accepted, rejected := handoffpb.HandoffStatus_PENDING, handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_REJECTED
	completed, expired := handoffpb.HandoffStatus_COMPLETED, handoffpb.HandoffStatus_EXPIRED
	all := []handoffpb.HandoffStatus{handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED, pending, accepted, rejected, completed, expired}
	legal := map[[2]handoffpb.HandoffStatus]bool{
		{pending, accepted}: true, {pending, rejected}: true, {pending, expired}: true,
		{accepted, completed}: true, {accepted, expired}: true,
	}
	for _, from := range all {
		for _, to := range all {
			assert.Equal(t, legal[[2]handoffpb.HandoffStatus{from, to}], protocol.CanTransition(from, to), "%s → %s", from, to)
		}
	}
	for _, s := range all {
		assert.Equal(t, s == rejected || s == completed || s == expired, protocol.HandoffTerminal(s), "%s", s)
	}
}

func TestValidateHandoffCall(t *testing.T) {
	assert.Nil(t, protocol.ValidateHandoffCall(validHandoff(), "application/json", "c1", 0))
	big := protocol.ValidateHandoffCall(validHandoff(), "application/json", "c1", 4)
	require.NotNil(t, big)
	assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, big.Code)
	long := protocol.ValidateHandoffCall(validHandoff(), "application/json", strings.Repeat("c", 257), 0)
	require.NotNil(t, long)
	assert.Contains(t, long.Msg, "longer than 256 bytes")
	assert.NotNil(t, protocol.ValidateHandoffCall(&handoffpb.HandoffRequest{}, "application/json", "c1", 0))
}

func TestValidateHandoffResponse(t *testing.T) {
	assert.Nil(t, protocol.ValidateHandoffResponse(&handoffpb.HandoffResponse{RequestId: "h-1", AcceptingAgent: "billing"}))
	assert.Contains(t, protocol.ValidateHandoffResponse(&handoffpb.HandoffResponse{AcceptingAgent: "billing"}).Msg, "request_id is required")
	assert.Contains(t, protocol.ValidateHandoffResponse(&handoffpb.HandoffResponse{RequestId: "h-1"}).Msg, "accepting_agent")
	redirect := &handoffpb.HandoffResponse{RequestId: "h-1", AcceptingAgent: "billing", RejectionCode: commonpb.ErrorCode_REDIRECT}
	assert.Nil(t, protocol.ValidateHandoffResponse(redirect), "a blank target is the workflow's to refuse: the handoff ends")
	redirect.RedirectToAgentId = "  "
	assert.Nil(t, protocol.ValidateHandoffResponse(redirect))
	redirect.RedirectToAgentId = "not an id!"
	assert.Contains(t, protocol.ValidateHandoffResponse(redirect).Msg, "redirect_to_agent_id", "a garbled target goes back to the target")
	redirect.RedirectToAgentId = "sales"
	assert.Nil(t, protocol.ValidateHandoffResponse(redirect))
}

// TestValidateRedirect: a REDIRECT's target is checked before the bound — blank, or back
// to the originator or an agent already offered (a loop), is validation_error.
func TestValidateRedirect(t *testing.T) {
	offered := []string{"b", "c"}
	assert.Nil(t, protocol.ValidateRedirect("d", "a", offered))
	for to, want := range map[string]string{
		"":    "non-empty redirect_to_agent_id",
		"   ": "non-empty redirect_to_agent_id",
		"b":   "redirect loop b → c → b: it was already offered this handoff",
		"c":   "redirect loop c → c",
		"a":   "redirect loop a → b → c → a: it is the originator",
	} {
		perr := protocol.ValidateRedirect(to, "a", offered)
		require.NotNil(t, perr, "%q", to)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code, "%q", to)
		assert.Contains(t, perr.Msg, want, "%q", to)
	}
}

// TestFollowsRedirects: allow_spillover_routing decides; no policy at all takes the
// server's default, which follows.
func TestFollowsRedirects(t *testing.T) {
	assert.True(t, protocol.FollowsRedirects(protocol.HandoffPolicy{}))
	assert.True(t, protocol.FollowsRedirects(protocol.HandoffPolicy{AllowSpillover: true, MaxRedirects: 4}))
	assert.False(t, protocol.FollowsRedirects(protocol.HandoffPolicy{MaxRedirects: 5}), "a policy without spillover returns the REDIRECT")
}

func TestMissingCapabilities(t *testing.T) {
	assert.Empty(t, protocol.MissingCapabilities([]string{"billing", "refunds"}, []string{"refunds"}))
	assert.Empty(t, protocol.MissingCapabilities(nil, nil))
	assert.Equal(t, []string{"tax", "law"}, protocol.MissingCapabilities([]string{"billing"}, []string{"tax", "billing", "law"}))
}

func TestValidateCompleteHandoff(t *testing.T) {
	assert.Nil(t, protocol.ValidateCompleteHandoff(&handoffpb.CompleteHandoffRequest{RequestId: "h-1"}))
	assert.Nil(t, protocol.ValidateCompleteHandoff(&handoffpb.CompleteHandoffRequest{RequestId: "h-1", Status: handoffpb.HandoffStatus_COMPLETED}))
	assert.NotNil(t, protocol.ValidateCompleteHandoff(&handoffpb.CompleteHandoffRequest{}))
	assert.Contains(t, protocol.ValidateCompleteHandoff(&handoffpb.CompleteHandoffRequest{RequestId: "h-1", Status: handoffpb.HandoffStatus_REJECTED}).Msg, "cannot be set by CompleteHandoff")
}

// TestHandoffCompletionDeadline: an accepted handoff's deadline is the earlier of its
// budget's wall time (from the request) and deadline, else the acceptance plus the default;
// nothing sets it later than MaxHandoffCompletionTimeout after the acceptance, and no value
// overflows.
func TestHandoffCompletionDeadline(t *testing.T) {
	requested := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	accepted := requested.Add(5 * time.Minute)
	limit := accepted.Add(protocol.MaxHandoffCompletionTimeout)
	ms := func(d time.Duration) uint64 { return uint64(d.Milliseconds()) }
	epoch := func(t time.Time) uint64 { return uint64(t.UnixMilli()) }
	for _, tc := range []struct {
		name           string
		wall, deadline uint64
		def            time.Duration
		want           time.Time
		why            string
	}{
		{"no budget: the configured timeout from the acceptance", 0, 0, 20 * time.Minute, accepted.Add(20 * time.Minute), "the completion timeout of 20m0s from the acceptance"},
		{"no budget, no configured timeout: the default", 0, 0, 0, accepted.Add(time.Hour), "the completion timeout of 1h0m0s"},
		{"a configured timeout past the limit is bounded", 0, 0, 1000 * time.Hour, limit, "720h0m0s"},
		{"wall time counts from the request", ms(2 * time.Hour), 0, time.Minute, requested.Add(2 * time.Hour), "wall_time_remaining_ms 7200000"},
		{"deadline_epoch_ms is absolute", 0, epoch(requested.Add(3 * time.Hour)), time.Minute, requested.Add(3 * time.Hour), "deadline_epoch_ms"},
		{"the earlier of the two: the deadline", ms(4 * time.Hour), epoch(requested.Add(3 * time.Hour)), 0, requested.Add(3 * time.Hour), "deadline_epoch_ms"},
		{"the earlier of the two: the wall time", ms(2 * time.Hour), epoch(requested.Add(3 * time.Hour)), 0, requested.Add(2 * time.Hour), "wall_time_remaining_ms"},
		{"a budget spent while the offer waited: already past", ms(time.Minute), 0, 0, requested.Add(time.Minute), "wall_time_remaining_ms"},
		{"a huge wall time is bounded", math.MaxUint64, 0, 0, limit, "bounded to 720h0m0s after the acceptance"},
		{"a far deadline is bounded", 0, math.MaxUint64, 0, limit, "bounded to 720h0m0s after the acceptance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := protocol.HandoffCompletionDeadline(requested, accepted, tc.wall, tc.deadline, tc.def)
			assert.Equal(t, tc.want, got.UTC())
			assert.Contains(t, why, tc.why)
		})
	}
}
