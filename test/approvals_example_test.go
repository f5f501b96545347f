package test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/approvals/retention"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestApprovalsExample: on both stores, the approvals example (examples/approvals, `make
// example-approvals`) ends by itself, well within its deadline, in each of its three
// endings: an operator approves the purge with `sw4rm hitl decide` and janitor calls
// records.purge, which the records agent runs; an operator denies it and janitor falls back
// without calling the tool; nobody decides within the short wait, the invocation's fallback
// denies it at its deadline and janitor falls back. Each time the invocation's outcome is
// recorded as janitor reported it, and both agents are deregistered with their lifecycles
// ended. The approved run's output is the README's, line for line.
func TestApprovalsExample(t *testing.T) {
	readme, err := os.ReadFile("../examples/approvals/README.md")
	require.NoError(t, err)
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			// hitlConfig configures operators, so a human can decide (without any HITL
			// component the fallback would decide at once, §15.3).
			sys := start(t, hitlConfig(t, kind))

			// run runs the example; decide, when set, is what the operator does once janitor
			// waits.
			run := func(t *testing.T, wait time.Duration, decide func(id string)) (*retention.Result, string) {
				ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
				defer cancel()
				var out bytes.Buffer
				began := time.Now()
				res, err := retention.Run(ctx, sys.app.GRPCAddr(), retention.Options{Out: &out, Wait: wait, Asked: decide})
				require.Less(t, time.Since(began), wait+30*time.Second, "the example ended only when its deadline cancelled it; output:\n%s", out.String())
				require.NoError(t, err, "example output:\n%s", out.String())
				require.NotEmpty(t, res.Invocation, "output:\n%s", out.String())

				// The cleanup: both agents deregistered, their lifecycles ended, nothing of the
				// records agent's left open.
				assert.Equal(t, []string{res.Records, res.Janitor}, res.Registered)
				assert.Equal(t, []string{res.Janitor, res.Records}, res.Deregistered)
				for _, id := range res.Registered {
					_, err := sys.app.Store().Registry().GetAgent(ctx, id)
					assert.ErrorIs(t, err, store.ErrNotFound, "%s is deregistered", id)
					assert.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.AgentWorkflowID(id), "").Get(ctx, nil), "%s's lifecycle ended", id)
				}
				open, err := sys.app.Store().ToolCalls().OpenCalls(ctx, "agent:"+res.Janitor, res.Records)
				require.NoError(t, err)
				assert.Empty(t, open, "no tool call is left open")
				return res, out.String()
			}
			// recorded is the invocation's outcome as the store recorded it.
			recorded := func(t *testing.T, id string) hitl.Outcome {
				rec, err := sys.app.Store().HITL().GetInvocation(t.Context(), id)
				require.NoError(t, err)
				require.Equal(t, store.HITLDecided, rec.Status)
				assert.Equal(t, "SECURITY_APPROVAL", rec.ReasonType)
				var o hitl.Outcome
				require.NoError(t, json.Unmarshal(rec.Outcome, &o))
				return o
			}

			t.Run("approved", func(t *testing.T) {
				const wait = 45 * time.Second
				res, out := run(t, wait, func(id string) {
					// The command the example prints, with the test's operator.
					decideWithCLI(t, sys, id, "approve", "past retention, no legal hold")
				})
				assert.True(t, res.Approved, out)
				assert.False(t, res.FellBack, out)
				assert.Equal(t, hitl.Approve, res.Outcome.Decision)
				assert.Equal(t, "alice", res.Outcome.DecidedBy)
				assert.Equal(t, "cli", res.Outcome.Via)
				o := recorded(t, res.Invocation)
				assert.Equal(t, hitl.Approve, o.Decision)
				assert.Equal(t, "alice", o.DecidedBy)
				assert.Equal(t, "past retention, no legal hold", o.Rationale)
				assert.False(t, o.Fallback)

				// The purge happened: the records agent got the call and the call succeeded.
				assert.Equal(t, []string{res.CallID}, res.Offers, out)
				assert.Equal(t, 1204, res.Purged)
				call, err := sys.app.Store().ToolCalls().GetCall(t.Context(), res.CallID)
				require.NoError(t, err)
				assert.Equal(t, res.Records, call.ProviderID)
				assert.Equal(t, retention.Tool, call.ToolName)
				var st workflows.ToolStatus
				require.NoError(t, sys.app.Temporal().GetWorkflow(t.Context(), workflows.ToolWorkflowID(res.CallID), "").Get(t.Context(), &st))
				assert.Empty(t, st.Code, "the call succeeded: %s", st.Message)

				// The README shows this run.
				assert.Equal(t, approvalsReadme(t, readme, res, sys.app.GRPCAddr(), wait, "alice"), strings.Split(strings.TrimSuffix(out, "\n"), "\n"))
			})

			t.Run("denied", func(t *testing.T) {
				res, out := run(t, 45*time.Second, func(id string) {
					decideWithCLI(t, sys, id, "deny", "acme is under legal hold")
				})
				assert.True(t, res.FellBack, out)
				assert.False(t, res.Approved, out)
				assert.Equal(t, hitl.Deny, res.Outcome.Decision)
				assert.Equal(t, "alice", res.Outcome.DecidedBy)
				o := recorded(t, res.Invocation)
				assert.Equal(t, hitl.Deny, o.Decision)
				assert.Equal(t, "acme is under legal hold", o.Rationale)
				assert.False(t, o.Fallback)
				assert.Empty(t, res.CallID, "no tool call was made")
				assert.Empty(t, res.Offers, "the records agent was never asked to purge")
				assert.Zero(t, res.Purged)
				assert.Contains(t, out, "denied by alice via cli: acme is under legal hold")
				assert.Contains(t, out, "falls back: files the purge for review and purges nothing")
			})

			t.Run("nobody decides", func(t *testing.T) {
				const wait = 3 * time.Second
				began := time.Now()
				res, out := run(t, wait, nil)
				assert.Less(t, time.Since(began), wait+15*time.Second, "the fallback ended the wait at its deadline")
				assert.True(t, res.FellBack, out)
				assert.False(t, res.Approved, out)
				assert.Empty(t, res.Offers, "the records agent was never asked to purge")
				o := recorded(t, res.Invocation)
				assert.Equal(t, hitl.Deny, o.Decision)
				assert.True(t, o.Fallback)
				assert.Equal(t, "fallback", o.DecidedBy)
				assert.Equal(t, hitl.DenyByDefault, o.FallbackPolicy)
				assert.Equal(t, "deadline", o.FallbackReason)
				// Janitor gets that outcome itself, unless its own deadline passes first: the
				// server answers within the second it keeps after the invocation's deadline,
				// which a loaded machine can miss; then janitor falls back on its own, and says so.
				if res.Outcome.InvocationID != "" {
					assert.Equal(t, o, res.Outcome, out)
					assert.Contains(t, out, "nobody decided (deadline): the fallback DENY_BY_DEFAULT answered deny")
				} else {
					assert.Contains(t, out, "no decision within "+wait.String())
				}
				assert.Contains(t, out, "falls back: files the purge for review and purges nothing")
			})
		})
	}
}

// decideWithCLI decides the invocation with `sw4rm hitl decide` as operator alice. The
// example prints the command as soon as Decide's header names the invocation, which can be a
// moment before the wait has recorded it for operators to list and decide (a human is never
// that fast; a test is): until then the CLI answers "unknown invocation", and the test asks
// again.
func decideWithCLI(t *testing.T, sys *system, id, decision, rationale string) {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = runCLI(t, sys, "alice-token", "decide", id, decision, "--rationale", rationale)
		if err == nil || !strings.Contains(out, "unknown invocation") || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, out)
	assert.Contains(t, out, decision+" by alice")
}

// approvalsReadme is the output block of examples/approvals/README.md (the ```text block after
// "It prints"), with the README's run suffix, invocation id, operator and wait replaced by the
// run's, and the test server's address in the printed commands.
func approvalsReadme(t *testing.T, readme []byte, res *retention.Result, server string, wait time.Duration, operator string) []string {
	t.Helper()
	m := regexp.MustCompile("(?s)It prints[^\n]*\n\n```text\n(.*?)\n```").FindSubmatch(readme)
	require.NotNil(t, m, "the README shows the output")
	block := string(m[1])
	s := regexp.MustCompile(`janitor-([0-9a-f]{8})`).FindStringSubmatch(block)
	require.NotNil(t, s, "the README's output names janitor-<suffix>")
	id := regexp.MustCompile(`HITL invocation ([0-9a-f-]{36})`).FindStringSubmatch(block)
	require.NotNil(t, id, "the README's output names the invocation")
	block = strings.NewReplacer(s[1], res.Suffix, id[1], res.Invocation, "by dev via", "by "+operator+" via",
		"waits up to 1m0s", "waits up to "+wait.String(), "hitl decide ", "hitl decide --server "+server+" ").Replace(block)
	return strings.Split(block, "\n")
}
