package test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/handoff/support"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestHandoffExample: on both stores, the handoff example (examples/handoff, `make
// example-handoff`) ends by itself, well within its deadline, and does what its README says:
// routing offers the ticket to the busy agent (OVERLOADED, offered again once, then passed
// on), then to the old desk, whose REDIRECT is followed because the request allows spillover
// routing, then to the expert, which reads the snapshot, accepts and completes; triage is told
// handoff_accepted and handoff_completed and is fenced on the ticket. It cleans up: every
// agent it registered is deregistered and its lifecycle ended, and the only dead letter it
// leaves is the message the fence refused. Its output is the README's, line for line.
func TestHandoffExample(t *testing.T) {
	readme, err := os.ReadFile("../examples/handoff/README.md")
	require.NoError(t, err)
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			// The deadline is what would end a run that hangs; a run that ends by itself takes a
			// few seconds and ends well before it.
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			var out bytes.Buffer
			began := time.Now()
			res, err := support.Run(ctx, sys.app.GRPCAddr(), support.Options{Out: &out, Wait: 45 * time.Second})
			require.Less(t, time.Since(began), time.Minute, "the example ended only when its deadline cancelled it; output:\n%s", out.String())
			require.NoError(t, err, "example output:\n%s", out.String())

			// The story, as the agents saw it.
			assert.Equal(t, []support.Answer{
				{Agent: res.Busy, Answer: "OVERLOADED"},
				{Agent: res.Busy, Answer: "OVERLOADED"},
				{Agent: res.Desk, Answer: "REDIRECT", RedirectTo: res.Expert},
				{Agent: res.Expert, Answer: "ACCEPTED"},
			}, res.Answers, "output:\n%s", out.String())
			assert.Equal(t, support.Ticket{ID: res.Ticket, Customer: "ACME Corp", Summary: "charged twice for the March invoice",
				Notes: "card ending 4242; customer wants a refund of the duplicate"}, res.Read, "the expert read the snapshot")
			assert.Equal(t, []string{"handoff_accepted", "handoff_completed"}, res.Events)
			assert.Equal(t, res.Expert, res.AcceptedBy)
			assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, res.FenceCode)
			assert.Equal(t, "permission_denied: fenced: correlation "+res.Ticket+" was handed to "+res.Expert+" by handoff "+res.Handoff+" (§17.6)", res.Fence)

			// The story, as the server recorded it.
			var hs workflows.HandoffResult
			require.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.HandoffWorkflowID(res.Handoff), "").Get(ctx, &hs))
			assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, hs.Status)
			assert.Equal(t, res.Expert, hs.AcceptedBy)
			assert.Equal(t, 1, hs.OverloadRetries)
			assert.Equal(t, 1, hs.Redirects, "the desk's REDIRECT was followed")
			var offered []string
			for _, o := range hs.Offers {
				offered = append(offered, o.Agent)
			}
			assert.Equal(t, []string{res.Busy, res.Busy, res.Desk, res.Expert}, offered)
			if assert.Len(t, hs.Offers, 4) {
				assert.Contains(t, hs.Offers[3].Reason, "redirected by "+res.Desk)
			}
			f, fenced, err := sys.app.Store().Handoffs().Fenced(ctx, res.Ticket, res.Triage)
			require.NoError(t, err)
			assert.True(t, fenced, "the originator is fenced on the ticket")
			assert.Equal(t, res.Expert, f.NewOwner)

			// The cleanup.
			assert.Equal(t, []string{res.Triage, res.Busy, res.Desk, res.Expert}, res.Registered)
			assert.Equal(t, res.Registered, res.Deregistered)
			for _, id := range res.Registered {
				_, err := sys.app.Store().Registry().GetAgent(ctx, id)
				assert.ErrorIs(t, err, store.ErrNotFound, "%s is deregistered", id)
				assert.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.AgentWorkflowID(id), "").Get(ctx, nil), "%s's lifecycle ended", id)
			}
			seen := map[int64]store.DLQEntry{}
			for _, id := range res.Registered {
				for _, f := range []store.DLQFilter{{ProducerID: id, IncludeRequeued: true}, {RecipientID: id, IncludeRequeued: true}} {
					es, err := sys.app.Store().DLQ().ListDeadLetters(ctx, f)
					require.NoError(t, err)
					for _, e := range es {
						seen[e.ID] = e
					}
				}
			}
			require.Len(t, seen, 1, "the only dead letter is the message the fence refused: %+v", seen)
			for _, e := range seen {
				assert.Equal(t, res.Triage, e.ProducerID)
				assert.Equal(t, res.Expert, e.RecipientID)
				assert.Equal(t, res.Ticket, e.CorrelationID)
				assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, e.ErrorCode)
				assert.Contains(t, e.Reason, "fenced")
			}

			// The README shows this output with its own suffix.
			assert.Equal(t, readmeOutput(t, readme, res.Suffix), strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"))
		})
	}
}

// readmeOutput is the output block of examples/handoff/README.md (the ```text block after
// "It prints"), with the README's run suffix replaced by suffix.
func readmeOutput(t *testing.T, readme []byte, suffix string) []string {
	t.Helper()
	m := regexp.MustCompile("(?s)It prints[^\n]*\n\n```text\n(.*?)\n```").FindSubmatch(readme)
	require.NotNil(t, m, "the README shows the output")
	block := string(m[1])
	s := regexp.MustCompile(`triage-([0-9a-f]{8})`).FindStringSubmatch(block)
	require.NotNil(t, s, "the README's output names triage-<suffix>")
	return strings.Split(strings.ReplaceAll(block, s[1], suffix), "\n")
}
