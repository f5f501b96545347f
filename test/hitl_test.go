package test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

const operatorSpec = "alice=alice-token,carol=carol-token:CONFLICT"

// The operators' own keys (SW4RM_HITL_OPERATOR_KEYS), for the raw signal door, and the seed
// of the deployment's decision key, which every server and worker of a test reads from a file.
var (
	aliceKey        = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0xa1}, ed25519.SeedSize))
	carolKey        = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0xc0}, ed25519.SeedSize))
	decisionKeySeed = bytes.Repeat([]byte{0xd1}, ed25519.SeedSize)
)

// operatorKeySpec configures aliceKey and carolKey.
func operatorKeySpec() string {
	pub := func(k ed25519.PrivateKey) string {
		return base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
	}
	return "alice=" + pub(aliceKey) + ",carol=" + pub(carolKey)
}

// signedBy is d as an operator signs it with their own key for the raw signal door (what
// `sw4rm hitl sign` prints), valid for ten minutes.
func signedBy(t testing.TB, d hitl.Decision, key ed25519.PrivateKey) hitl.Decision {
	t.Helper()
	if d.Via == "" {
		d.Via = "signal"
	}
	s, err := hitl.Attest(d, key, time.Now().Add(hitl.DefaultAttestationTTL))
	require.NoError(t, err)
	return s
}

// writeKeyFile writes an Ed25519 seed as a key file (hex, one line) and returns its path.
func writeKeyFile(t testing.TB, seed []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hitl-decision.key")
	require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString(seed)+"\n"), 0o600))
	return p
}

// requireNoSecretInHistory fails if the workflow's history holds an operator token, in
// clear or hashed, in any payload: signal inputs, activity inputs and results (the policy the
// workflow loaded), the workflow's input and result.
func requireNoSecretInHistory(t *testing.T, tc client.Client, workflowID string, tokens ...string) {
	t.Helper()
	iter := tc.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.Marshal(h)
	require.NoError(t, err)
	// Payloads are base64 inside the history's JSON: search them decoded.
	all := string(b)
	for _, m := range regexp.MustCompile(`"data":"([A-Za-z0-9+/=]+)"`).FindAllStringSubmatch(string(b), -1) {
		raw, err := base64.StdEncoding.DecodeString(m[1])
		require.NoError(t, err)
		all += "\n" + string(raw)
	}
	require.Contains(t, all, `"attestation"`, "the history holds the attested decision")
	require.Contains(t, all, `"decision_keys"`, "the history holds the policy the workflow loaded")
	for _, tok := range tokens {
		assert.NotContains(t, all, tok, "a token in the history")
	}
	assert.NotContains(t, all, `"token"`)
	assert.NotRegexp(t, `"token_sha256":"[0-9a-f]`, all, "no token hash in the policy")
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// sw4rmCLI builds the sw4rm binary once per test run: the CLI door is tested as operators use it.
func sw4rmCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sw4rm-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "sw4rm")
		out, err := exec.Command("go", "build", "-o", cliPath, "../cmd/sw4rm").CombinedOutput()
		if err != nil {
			cliErr = &exec.ExitError{Stderr: out}
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}

// runCLI runs `sw4rm hitl ...` against the system and returns its combined output and error.
func runCLI(t *testing.T, sys *system, token string, args ...string) (string, error) {
	t.Helper()
	return runCLIArgs(t, sys, token, append([]string{"hitl", "--server", sys.app.GRPCAddr()}, args...)...)
}

// runCLIArgs runs the sw4rm binary with an operator token.
func runCLIArgs(t *testing.T, _ *system, token string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(sw4rmCLI(t), args...)
	// A cache directory of its own: a `sw4rm dev` run on this machine leaves the dev
	// operator's token in the user's cache, which the CLI would offer when given none.
	cmd.Env = append(os.Environ(), "SW4RM_OPERATOR_TOKEN="+token, "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pendingDecide calls the canonical HitlService.Decide in the background and returns the
// invocation id it raised (from the response header) and a channel with its answer.
type decideResult struct {
	dec *hitlpb.HitlDecision
	err error
}

func pendingDecide(t *testing.T, sys *system, reason commonpb.HitlReasonType) (string, chan decideResult) {
	t.Helper()
	conn := dialRaw(t, sys)
	c := hitlpb.NewHitlServiceClient(conn)
	ctxJSON, _ := json.Marshal(hitl.Context{Facts: []string{"agent wants prod credentials"}, RiskNotes: []string{"blast radius: all tenants"}})
	res := make(chan decideResult, 1)
	header := make(chan metadata.MD, 1)
	go func() {
		var md metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stream, err := c.Decide(ctx, &hitlpb.HitlInvocation{ReasonType: reason, Context: ctxJSON, ProposedActions: []string{"approve", "deny"}, Priority: -5}, grpc.Header(&md))
		header <- md
		res <- decideResult{stream, err}
	}()
	// The header arrives before Decide blocks; but grpc.Header fills md only when the call
	// returns, so find the invocation through the store instead.
	var id string
	require.Eventually(t, func() bool {
		recs, err := sys.app.Store().HITL().ListInvocations(context.Background(), store.HITLFilter{Status: store.HITLPending, ReasonType: reason.String()})
		if err != nil || len(recs) == 0 {
			return false
		}
		id = recs[len(recs)-1].InvocationID
		return true
	}, 20*time.Second, 50*time.Millisecond)
	go func() { <-header }()
	return id, res
}

func awaitDecision(t *testing.T, res chan decideResult) *hitlpb.HitlDecision {
	t.Helper()
	select {
	case r := <-res:
		require.NoError(t, r.err)
		return r.dec
	case <-time.After(60 * time.Second):
		t.Fatal("Decide did not return")
		return nil
	}
}

func hitlConfig(t *testing.T, kind string) app.Config {
	cfg := newConfig(t, kind)
	cfg.HITLOperators = operatorSpec
	cfg.HITLOperatorKeys = operatorKeySpec()
	cfg.HITLDecisionKeyFile = writeKeyFile(t, decisionKeySeed)
	return cfg
}

// TestHitlDecideBlocksUntilCLIApproves: the canonical Decide raises an invocation and blocks;
// an operator lists it and approves it with the CLI; Decide returns the approval. Repeating
// the same decision is idempotent, a different one is refused.
func TestHitlDecideBlocksUntilCLIApproves(t *testing.T) {
	sys := start(t, hitlConfig(t, "postgres"))
	id, res := pendingDecide(t, sys, commonpb.HitlReasonType_SECURITY_APPROVAL)

	out, err := runCLI(t, sys, "alice-token", "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, id)
	assert.Contains(t, out, "SECURITY_APPROVAL")
	assert.Contains(t, out, "DEADLINE")
	select {
	case r := <-res:
		t.Fatalf("Decide returned before any decision: %+v", r)
	default:
	}

	out, err = runCLI(t, sys, "alice-token", "decide", id, "approve", "--rationale", "scoped to one tenant")
	require.NoError(t, err, out)
	assert.Contains(t, out, "approve by alice")
	dec := awaitDecision(t, res)
	assert.Equal(t, "approve", dec.GetAction())
	assert.Equal(t, "scoped to one tenant", dec.GetRationale())
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal(dec.GetDecisionPayload(), &o))
	assert.Equal(t, "cli", o.Via)
	assert.False(t, o.Fallback)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, ed25519.NewKeyFromSeed(decisionKeySeed).Public().(ed25519.PublicKey)), o.AttestedBy,
		"the decision key vouched for alice")
	requireNoSecretInHistory(t, sys.app.Temporal(), hitl.WorkflowID(id), "alice-token", hitl.HashToken("alice-token"))
	// hitl_wait_cli_approved.json, recorded before decisions were attested, carries a token
	// and stays as the proof that such runs still replay.
	recordHistory(t, sys.app.Temporal(), hitl.WorkflowID(id), "hitl_wait_cli_attested")

	out, err = runCLI(t, sys, "alice-token", "decide", id, "approve", "--rationale", "scoped to one tenant")
	require.NoError(t, err, out)
	assert.Contains(t, out, "already applied")
	out, err = runCLI(t, sys, "alice-token", "decide", id, "deny", "--rationale", "changed my mind")
	require.Error(t, err)
	assert.Contains(t, out, "already decided")

	out, err = runCLI(t, sys, "alice-token", "history", id)
	require.NoError(t, err, out)
	assert.Contains(t, out, "hitl.invoked")
	assert.Contains(t, out, "hitl.decided")
	assert.Contains(t, out, "alice")
}

// TestHitlRawTemporalSignal decides with a plain `temporal workflow signal`, as docs/hitl.md
// shows, and checks that an unauthenticated decision through every door changes nothing.
func TestHitlRawTemporalSignal(t *testing.T) {
	sys := start(t, hitlConfig(t, "memory"))
	id, res := pendingDecide(t, sys, commonpb.HitlReasonType_CONFLICT)

	// Refused: no token, a wrong token, an operator not allowed for the reason type...
	out, err := runCLI(t, sys, "", "decide", id, "approve", "--rationale", "x")
	require.Error(t, err)
	assert.Contains(t, out, "operator token is required")
	out, err = runCLI(t, sys, "not-a-token", "decide", id, "approve", "--rationale", "x")
	require.Error(t, err)
	assert.Contains(t, out, "not valid")
	out, err = runCLI(t, sys, "alice-token", "decide", "no-such-invocation", "approve", "--rationale", "x")
	require.Error(t, err)
	assert.Contains(t, out, "unknown invocation")
	// ...and a raw signal with a wrong token is refused by the workflow itself.
	signal := func(payload string) {
		cmd := exec.Command(temporalCLI(), "workflow", "signal", "--address", temporalAddr, "--namespace", "default",
			"--workflow-id", hitl.WorkflowID(id), "--name", hitl.DecisionSignal, "--input", payload)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, string(b))
	}
	refusedFor := func(why string) {
		t.Helper()
		require.Eventually(t, func() bool {
			evs, _ := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.decision_refused"})
			for _, e := range evs {
				if strings.Contains(string(e.Details), why) {
					return true
				}
			}
			return false
		}, 15*time.Second, 50*time.Millisecond, why)
	}
	// A token is refused even when it is valid: it must not enter history.
	signal(`{"invocation_id":"` + id + `","decision":"approve","rationale":"sneaky","operator":"carol","token":"carol-token"}`)
	refusedFor("carrying a token is refused")
	// alice's own key does not speak for carol.
	out, err = runCLIArgs(t, sys, "", "hitl", "sign", "--key", writeKeyFile(t, aliceKey.Seed()), "--operator", "carol",
		"--invocation", id, "--decision", "approve", "--rationale", "posing as carol")
	require.NoError(t, err, out)
	signal(strings.SplitN(out, "\n", 2)[0])
	refusedFor(`nor a key of operator \"carol\"`)
	rec, err := sys.app.Store().HITL().GetInvocation(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, store.HITLPending, rec.Status, "a refused decision changes nothing")

	// carol may decide CONFLICT invocations: a decision signed with her key, printed by
	// `sw4rm hitl sign` and sent with a raw signal, completes it.
	out, err = runCLIArgs(t, sys, "", "hitl", "sign", "--key", writeKeyFile(t, carolKey.Seed()), "--operator", "carol",
		"--invocation", id, "--decision", "deny", "--rationale", "scopes overlap on src/ui")
	require.NoError(t, err, out)
	signedJSON, hint, _ := strings.Cut(out, "\n")
	assert.Contains(t, hint, "temporal workflow signal --workflow-id "+hitl.WorkflowID(id))
	signal(signedJSON)
	dec := awaitDecision(t, res)
	assert.Equal(t, "deny", dec.GetAction())
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal(dec.GetDecisionPayload(), &o))
	assert.Equal(t, "signal", o.Via)
	assert.Equal(t, "carol", o.DecidedBy)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, carolKey.Public().(ed25519.PublicKey)), o.AttestedBy)
	recordHistory(t, sys.app.Temporal(), hitl.WorkflowID(id), "hitl_wait_raw_signed")
}

// TestHitlSurvivesWorkerRestart kills the worker while an invocation waits; the decision is
// signalled while no worker runs, and a new worker completes the wait.
func TestHitlSurvivesWorkerRestart(t *testing.T) {
	cfg := hitlConfig(t, "postgres")
	ctx := context.Background()
	srv, err := app.Start(ctx, cfg, app.Roles{Server: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	wcfg := cfg
	wcfg.GRPCAddr, wcfg.HTTPAddr = "", ""
	wrk, err := app.Start(ctx, wcfg, app.Roles{Worker: true}, testLogger())
	require.NoError(t, err)
	sys := &system{app: srv, cfg: cfg}
	id, res := pendingDecide(t, sys, commonpb.HitlReasonType_TASK_ESCALATION)

	wrk.Stop() // no worker runs now
	require.NoError(t, workflows.SignalHITLDecision(ctx, srv.Temporal(), signedBy(t, hitl.Decision{
		InvocationID: id, Decision: hitl.Approve, Rationale: "approved while the worker was down", Operator: "alice",
	}, aliceKey)))
	select {
	case r := <-res:
		t.Fatalf("decided without a worker: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	wrk2, err := app.Start(ctx, wcfg, app.Roles{Worker: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(wrk2.Stop)
	dec := awaitDecision(t, res)
	assert.Equal(t, "approve", dec.GetAction())
	assert.Equal(t, "approved while the worker was down", dec.GetRationale())
}

// TestHitlDecideFallsBackAtDeadline: with nobody deciding, Decide returns the deny-by-default
// fallback when its deadline passes, and the outcome says so.
func TestHitlDecideFallsBackAtDeadline(t *testing.T) {
	cfg := hitlConfig(t, "memory")
	cfg.HITLTimeout = 2 * time.Second
	sys := start(t, cfg)
	_, res := pendingDecide(t, sys, commonpb.HitlReasonType_MANUAL_OVERRIDE)
	dec := awaitDecision(t, res)
	assert.Equal(t, "deny", dec.GetAction())
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal(dec.GetDecisionPayload(), &o))
	assert.True(t, o.Fallback)
	assert.Equal(t, hitl.DenyByDefault, o.FallbackPolicy)
	assert.Equal(t, "deadline", o.FallbackReason)
	recordHistory(t, sys.app.Temporal(), hitl.WorkflowID(o.InvocationID), "hitl_wait_deadline_fallback")
}

// TestHitlInRequiredAuth: with SW4RM_AUTH=required the auth interceptor proves the operator,
// and the HITL doors take that principal. One idempotency key used by two operators names two
// invocations (§23: one caller cannot poison another's key), each decided through the CLI.
func TestHitlInRequiredAuth(t *testing.T) {
	cfg := hitlConfig(t, "memory")
	cfg.Auth = auth.Required
	sys := start(t, cfg)
	c := hitlpb.NewHitlServiceClient(dialRaw(t, sys))
	key := uniq(t, "shared")
	ctxJSON, _ := json.Marshal(hitl.Context{Facts: []string{"two agents edit src/ui"}})
	raise := func(token string) chan decideResult {
		res := make(chan decideResult, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, wire.IdempotencyKey, key)
			d, err := c.Decide(ctx, &hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_CONFLICT, Context: ctxJSON, ProposedActions: []string{"approve", "deny"}})
			res <- decideResult{d, err}
		}()
		return res
	}
	pending := func(n int) []store.HITLRecord {
		t.Helper()
		var recs []store.HITLRecord
		require.Eventually(t, func() bool {
			var err error
			recs, err = sys.app.Store().HITL().ListInvocations(context.Background(), store.HITLFilter{Status: store.HITLPending, ReasonType: "CONFLICT"})
			return err == nil && len(recs) == n
		}, 20*time.Second, 50*time.Millisecond)
		return recs
	}
	byAlice := raise("alice-token")
	first := pending(1)[0].InvocationID
	byCarol := raise("carol-token")
	recs := pending(2)
	second := recs[0].InvocationID
	if second == first {
		second = recs[1].InvocationID
	}
	require.NotEqual(t, first, second, "the same key by another caller is another invocation")

	out, err := runCLI(t, sys, "alice-token", "decide", first, "approve", "--rationale", "alice's own question")
	require.NoError(t, err, out)
	out, err = runCLI(t, sys, "carol-token", "decide", second, "deny", "--rationale", "carol's own question")
	require.NoError(t, err, out)
	assert.Equal(t, "approve", awaitDecision(t, byAlice).GetAction())
	assert.Equal(t, "deny", awaitDecision(t, byCarol).GetAction())
	out, err = runCLI(t, sys, "not-a-token", "list")
	require.Error(t, err)
	assert.Contains(t, out, "Unauthenticated")
	requireNoSecretInHistory(t, sys.app.Temporal(), hitl.WorkflowID(first), "alice-token", hitl.HashToken("alice-token"))
}
