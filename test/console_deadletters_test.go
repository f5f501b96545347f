package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// dlDo runs actions in the tab within d.
func dlDo(t *testing.T, tab context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, d)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, actions...))
}

// dlWaitText waits until the text of the first element sel matches contains want, and
// returns that text.
func dlWaitText(t *testing.T, tab context.Context, sel, want string) string {
	t.Helper()
	quote := func(s string) string {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
	}
	js := `(function(){var e=document.querySelector(` + quote(sel) + `);return !!e && e.textContent.indexOf(` + quote(want) + `)>=0})()`
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond))), "%s shows %q", sel, want)
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err)
	return s
}

// dlWaitExact waits until the text of the first element sel matches is want.
func dlWaitExact(t *testing.T, tab context.Context, sel, want string) {
	t.Helper()
	js := fmt.Sprintf(`(function(){var e=document.querySelector(%q);return !!e && e.textContent.trim()===%q})()`, sel, want)
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond))), "%s is %q", sel, want)
}

// dlNack sends a message from a to b, which fails it for good (a terminal error), and
// returns the sent message's id once its dead letter exists.
func dlNack(t *testing.T, a, b *signedAgent, bIn *inbox, payload string) string {
	t.Helper()
	ctx := context.Background()
	sent, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(payload)})
	require.NoError(t, err)
	d := bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
	require.NoError(t, d.Ack(ctx, commonpb.AckStage_FAILED, commonpb.ErrorCode_PERMISSION_DENIED, "card processor refused"))
	return sent.GetMessageId()
}

// TestConsoleDeadLetters drives the Dead letters page on both stores in required mode: the
// list, opened before anything failed, shows a dead letter as it appears (live updates);
// the operator inspects it — its fields, its JSON payload escaped, its attempt history —
// and requeues it from the page, which names the new message id, which the recipient then
// receives; an export downloads the JSON bundle; bad filters and empty forms are refused
// with 400 and validation_error, also without JavaScript.
func TestConsoleDeadLetters(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := consoleSystem(t, kind, auth.Required)
			alice, bob := dialSigned(t, sys, "payer"), dialSigned(t, sys, "processor")
			bobIn := openInbox(t, bob.Agent)
			admin := dlqadminpb.NewDlqAdminServiceClient(dialRaw(t, sys))

			tab := consoleTab(t, base)
			list := base + "dead-letters?producer=" + url.QueryEscape(alice.ID())
			dlDo(t, tab, 20*time.Second, chromedp.Navigate(list), chromedp.WaitVisible(chromedp.CSS(`#dl-list`)))
			dlWaitText(t, tab, `#dl-list`, "No dead letters match.")

			msg := dlNack(t, alice, bob, bobIn, `{"amount":42,"note":"<b>bold</b>"}`)
			var entry *dlqadminpb.DeadLetter
			require.Eventually(t, func() bool {
				resp, err := admin.ListDeadLetters(operatorContext(), &dlqadminpb.ListDeadLettersRequest{Filter: &dlqadminpb.DeadLetterFilter{Producer: alice.ID()}})
				require.NoError(t, err)
				if len(resp.GetDeadLetters()) == 1 {
					entry = resp.GetDeadLetters()[0]
				}
				return entry != nil
			}, 15*time.Second, 50*time.Millisecond)
			require.Equal(t, msg, entry.GetMessageId())
			row := fmt.Sprintf(`#dl-%d`, entry.GetId())

			// It appears without a reload.
			dlDo(t, tab, 20*time.Second, chromedp.WaitVisible(chromedp.CSS(row)))
			assert.Contains(t, dlWaitText(t, tab, row, "terminal_error"), "PERMISSION_DENIED")
			consoleScreenshot(t, tab, "dead-letters")
			assert.Empty(t, consoleAxe(t, tab), "axe-core on the list with an entry")

			// Inspect it.
			dlDo(t, tab, 20*time.Second, chromedp.Click(chromedp.CSS(row+` a`)), chromedp.WaitVisible(chromedp.CSS(`#dl-payload`)))
			payload := dlWaitText(t, tab, `#dl-payload`, `"amount": 42`)
			assert.Contains(t, payload, `"note": "<b>bold</b>"`, "the payload is shown as text, not markup")
			bold, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#dl-payload b').length`))
			require.NoError(t, err)
			assert.Zero(t, bold, "no element came from the payload")
			page := dlWaitText(t, tab, `main`, msg)
			assert.Contains(t, page, "card processor refused")
			assert.Contains(t, page, bob.ID())
			assert.Contains(t, page, "FAILED", "the attempt history")
			envelope := dlWaitText(t, tab, `#dl-envelope`, msg)
			// protojson varies its spacing on purpose: compare the fields, not the text.
			assert.Regexp(t, `"producerId":\s+"`+regexp.QuoteMeta(alice.ID())+`"`, envelope, "the envelope's fields")
			assert.NotContains(t, envelope, `"payload"`, "the payload is shown apart, as an excerpt")
			consoleScreenshot(t, tab, "dead-letter")
			assert.Empty(t, consoleAxe(t, tab), "axe-core on the entry")

			// Requeue it: the flash names the new message, which reaches the recipient.
			dlDo(t, tab, 20*time.Second, chromedp.Click(chromedp.CSS(`#dl-requeue`)), chromedp.WaitNotPresent(chromedp.CSS(`#dl-requeue`)))
			flash := dlWaitText(t, tab, `#status`, "requeued as message")
			m := regexp.MustCompile(`requeued as message (\S+)\.`).FindStringSubmatch(flash)
			require.Len(t, m, 2, flash)
			newID := m[1]
			dlWaitText(t, tab, `#dl-requeued`, newID)
			got, err := admin.GetDeadLetter(operatorContext(), &dlqadminpb.GetDeadLetterRequest{Id: entry.GetId()})
			require.NoError(t, err)
			assert.Equal(t, newID, got.GetDeadLetter().GetRequeuedAs())
			bobIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == newID })
			consoleScreenshot(t, tab, "dead-letter-requeued")

			// Without JavaScript: the forms, the export and the refusals.
			c := consoleClient(t)
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)
			code, body := consoleGet(t, c, list+"&all=1")
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, "requeued</span> as "+newID)
			code, body = consoleGet(t, c, base+"dead-letters?class=exploded")
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error: unknown error class")
			code, body = consoleGet(t, c, base+"dead-letters?since=yesterday")
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error: since")
			code, body = consoleGet(t, c, base+"dead-letters/0")
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error")
			code, _ = consoleGet(t, c, base+"dead-letters/999999")
			assert.Equal(t, http.StatusNotFound, code)

			post := func(path string, form url.Values) (*http.Response, string) {
				t.Helper()
				resp, err := c.PostForm(base+path, form)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, string(b)
			}
			resp, body := post("dead-letters/requeue", url.Values{})
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Contains(t, body, "validation_error: name at least one dead letter id")
			resp, body = post("dead-letters/requeue", url.Values{"id": {"x"}})
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Contains(t, body, "validation_error")
			// A second requeue is refused per entry, and said so.
			resp, _ = post("dead-letters/requeue", url.Values{"id": {fmt.Sprint(entry.GetId())}, "back": {"https://evil.example/"}})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			loc, err := url.Parse(resp.Header.Get("Location"))
			require.NoError(t, err)
			assert.Equal(t, "/console/dead-letters", loc.Path, "the way back stays in the console")
			assert.Contains(t, loc.Query().Get("flash"), "not requeued (FAILED_PRECONDITION)")

			resp, body = post("dead-letters/export", url.Values{"id": {fmt.Sprint(entry.GetId())}})
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Regexp(t, `^attachment; filename="sw4rm-dead-letters-\d{8}T\d{6}Z\.json"$`, resp.Header.Get("Content-Disposition"))
			var bundle struct {
				Format  string `json:"format"`
				Count   int    `json:"count"`
				Entries []struct {
					ID         int64  `json:"id"`
					MessageID  string `json:"message_id"`
					RequeuedAs string `json:"requeued_as"`
				} `json:"entries"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &bundle))
			assert.Equal(t, "sw4rm.dlq.bundle/v1", bundle.Format)
			require.Equal(t, 1, bundle.Count)
			assert.Equal(t, msg, bundle.Entries[0].MessageID)
			assert.Equal(t, newID, bundle.Entries[0].RequeuedAs)
			// With nothing selected, the export is what the posted filter matches.
			resp, body = post("dead-letters/export", url.Values{"producer": {alice.ID()}, "all": {"1"}})
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.NoError(t, json.Unmarshal([]byte(body), &bundle))
			assert.Equal(t, 1, bundle.Count)
			resp, body = post("dead-letters/export", url.Values{"class": {"exploded"}})
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Contains(t, body, "validation_error")
		})
	}
}

// TestConsoleNegotiations: on both stores in required mode, the Negotiations page shows an
// open negotiation with its round, the draft with its score and the evaluation, updating as
// the negotiation moves on; a bad filter is refused with validation_error.
func TestConsoleNegotiations(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := consoleSystem(t, kind, auth.Required)
			ctx := context.Background()
			buyer, seller := dialSigned(t, sys, "buyer"), dialSigned(t, sys, "seller")
			nb, ns := negotiation.New(buyer.Agent), negotiation.New(seller.Agent)
			id := uniq(t, "neg")
			require.NoError(t, nb.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders <price>", Participants: []string{buyer.ID(), seller.ID()},
				Intensity: commonpb.DebateIntensity_LOW, Timeout: 10 * time.Minute}))

			tab := consoleTab(t, base)
			sec := `#neg-` + id
			dlDo(t, tab, 20*time.Second, chromedp.Navigate(base+"negotiations"), chromedp.WaitVisible(chromedp.CSS(sec)))
			assert.Contains(t, dlWaitText(t, tab, sec+` .neg-status`, "open"), "open")
			dlWaitExact(t, tab, sec+` .neg-round-n`, "0")
			dlWaitText(t, tab, sec+` h3`, "/api/v3/orders <price>")

			// A proposal and an evaluation show without a reload.
			require.NoError(t, nb.Propose(ctx, id, "application/json", []byte(`{"api":"orders","price":5}`)))
			require.NoError(t, ns.Evaluate(ctx, id, 0.4, "too cheap to be true"))
			dlWaitExact(t, tab, sec+` .neg-round-n`, "1")
			dlWaitText(t, tab, sec+` .neg-versions`, seller.ID()+": 0.40 — too cheap to be true")
			assert.Contains(t, dlWaitText(t, tab, sec+` .neg-draft`, `"price": 5`), `"api": "orders"`)
			assert.NotEmpty(t, dlWaitText(t, tab, sec+` .neg-score`, "."))
			consoleScreenshot(t, tab, "negotiations")
			assert.Empty(t, consoleAxe(t, tab), "axe-core on a negotiation with a draft")

			c := consoleClient(t)
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)
			code, body := consoleGet(t, c, base+"negotiations?id="+url.QueryEscape(id))
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, "/api/v3/orders &lt;price&gt;")
			assert.Contains(t, body, buyer.ID()+", "+seller.ID())
			code, body = consoleGet(t, c, base+"negotiations?tab=closed&id="+url.QueryEscape(id))
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, "No negotiations here.")
			code, body = consoleGet(t, c, base+"negotiations?id="+url.QueryEscape("x' OR 1=1"))
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error: negotiation_id")
		})
	}
}
