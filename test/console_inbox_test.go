package test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/console"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// inboxSystem is sw4rm with the console, auth required, and the fake tool provider, whose
// calls at privilege ELEVATED wait for an operator's approval.
func inboxSystem(t *testing.T, kind string) (*system, string) {
	t.Helper()
	return consoleSystem(t, kind, auth.Required, func(cfg *app.Config) {
		cfg.ToolExecutors = map[string]tools.Executor{"fake": &fakeProvider{}}
	})
}

// inboxElevatedCall starts a tool call at privilege ELEVATED by a signed agent in the background
// and returns its approval's invocation id (once pending) and a channel with the call's end.
func inboxElevatedCall(t *testing.T, sys *system, caller *signedAgent, args string) (string, chan error) {
	t.Helper()
	id := uniq(t, "call")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := toolpb.NewToolServiceClient(caller.Conn()).Call(ctx, &toolpb.ToolCall{CallId: id, ProviderId: "fake", ToolName: "echo",
			Args: []byte(args), Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "ELEVATED"}})
		done <- err
	}()
	hitlID := pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, id)
	require.Equal(t, workflows.ToolApprovalID(id), hitlID)
	return hitlID, done
}

// inboxCallEnd waits for a call started by inboxElevatedCall.
func inboxCallEnd(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the tool call did not end")
		return nil
	}
}

// inboxDo runs actions on tab within a bound.
func inboxDo(t *testing.T, tab context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, d)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, actions...))
}

// inboxText is the text of the first element sel matches.
func inboxText(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, 10*time.Second)
	defer stop()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// inboxWaitText waits until the text of sel contains want.
func inboxWaitText(t *testing.T, tab context.Context, sel, want string) {
	t.Helper()
	js := `(function(){var e=document.querySelector(` + inboxJS(sel) + `);return !!e && e.textContent.indexOf(` + inboxJS(want) + `)>=0})()`
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond))), "%s shows %q", sel, want)
}

func inboxJS(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// TestConsoleInboxInBrowser drives the Approvals inbox in headless Chromium on both stores
// with authentication required: a tool call needing approval appears in the open inbox
// without a reload; its page shows its reason, context, proposed actions, deadline and
// fallback and links to its hitl/<id> run; it is approved with a comment and the call
// completes, the audit trail naming the operator and the door "web". A second call is denied
// from the keyboard (j to the item, d), and the call is refused; a third is modified with
// JSON (invalid JSON first, refused on the page with nothing sent) and runs. A decision made
// through gRPC shows on an open item's page at once. An invocation whose short deadline
// passes shows under Expired with the fallback that applied.
func TestConsoleInboxInBrowser(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := inboxSystem(t, kind)
			caller := dialSigned(t, sys, "inbox-caller")
			tab := consoleTab(t, base)
			admin := hitladminpb.NewHitlAdminServiceClient(dialRaw(t, sys))

			// Approve: the item appears in the open inbox by itself.
			inboxDo(t, tab, 20*time.Second, chromedp.WaitVisible(chromedp.CSS(`#inbox-count`)))
			id, done := inboxElevatedCall(t, sys, caller, `{"target":"prod-db"}`)
			row := `tr[data-invocation="` + id + `"]`
			inboxDo(t, tab, 20*time.Second, chromedp.WaitVisible(chromedp.CSS(row)))
			assert.Contains(t, inboxText(t, tab, row), "TOOL_PRIVILEGE_ESCALATION")
			assert.Contains(t, inboxText(t, tab, row), "DENY_BY_DEFAULT")
			consoleScreenshot(t, tab, "inbox-"+kind)
			inboxDo(t, tab, 20*time.Second, chromedp.Click(chromedp.CSS(row+` th a`)), chromedp.WaitVisible(chromedp.CSS(`#rationale`)))
			assert.Equal(t, "TOOL_PRIVILEGE_ESCALATION", inboxText(t, tab, `#item-reason`))
			assert.Contains(t, inboxText(t, tab, `#item-facts`), "privilege level ELEVATED")
			assert.Contains(t, inboxText(t, tab, `#item-proposed`), "approve: run the call at ELEVATED")
			assert.Contains(t, inboxText(t, tab, `#item-fallback`), "DENY_BY_DEFAULT: denied at the deadline")
			ctx, stop := context.WithTimeout(tab, 10*time.Second)
			href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#temporal-run').getAttribute('href')`))
			stop()
			require.NoError(t, err)
			assert.Equal(t, "http://temporal-ui.invalid/namespaces/default/workflows/"+url.PathEscape("hitl/"+id), href)
			consoleScreenshot(t, tab, "inbox-item-"+kind)
			inboxDo(t, tab, 20*time.Second,
				chromedp.SendKeys(chromedp.CSS(`#rationale`), "scoped to the test database"),
				chromedp.Click(chromedp.CSS(`button[value="approve"]`)),
				chromedp.WaitVisible(chromedp.CSS(`#item-outcome`)))
			assert.Contains(t, inboxText(t, tab, `#status`), "Approved "+id+" (by "+authOperator+" via web)")
			assert.Equal(t, "Approved", inboxText(t, tab, `#item-state`))
			require.NoError(t, inboxCallEnd(t, done), "the approved call completes")
			// The audit event follows the recorded outcome: the page's event stream brings it.
			inboxWaitText(t, tab, `#item-audit`, "hitl.decided")
			audit := inboxText(t, tab, `#item-audit`)
			assert.Contains(t, audit, "hitl.invoked")
			assert.Contains(t, audit, authOperator)
			assert.Contains(t, audit, "web")
			assert.Contains(t, audit, "scoped to the test database")

			// Deny from the keyboard: j selects the item, d opens it to deny.
			id, done = inboxElevatedCall(t, sys, caller, `{}`)
			inboxDo(t, tab, 20*time.Second, chromedp.Navigate(base+"inbox"), chromedp.WaitVisible(chromedp.CSS(`tr[data-invocation="`+id+`"]`)),
				chromedp.KeyEvent("j"), chromedp.KeyEvent("d"), chromedp.WaitVisible(chromedp.CSS(`#rationale`)))
			assert.Contains(t, inboxText(t, tab, `h1`), id)
			ctx, stop = context.WithTimeout(tab, 10*time.Second)
			focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id`))
			stop()
			require.NoError(t, err)
			assert.Equal(t, "rationale", focused, "the comment has the focus")
			// Typing "d" in the comment types it: shortcuts are off while typing.
			inboxDo(t, tab, 20*time.Second, chromedp.KeyEvent("do not"), chromedp.Click(chromedp.CSS(`button[value="deny"]`)),
				chromedp.WaitVisible(chromedp.CSS(`#item-outcome`)))
			assert.Equal(t, "Denied", inboxText(t, tab, `#item-state`))
			err = inboxCallEnd(t, done)
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "refused by "+authOperator+" (deny)")
			rec, err := sys.app.Store().HITL().GetInvocation(context.Background(), id)
			require.NoError(t, err)
			assert.Contains(t, string(rec.Outcome), `"rationale":"do not"`)

			// Modify: invalid JSON is refused on the page and nothing is sent; valid JSON runs.
			id, done = inboxElevatedCall(t, sys, caller, `{"rows":1000}`)
			item := base + "inbox/" + url.PathEscape(id)
			inboxDo(t, tab, 20*time.Second, chromedp.Navigate(item), chromedp.WaitVisible(chromedp.CSS(`#patch`)))
			ctx, stop = context.WithTimeout(tab, 10*time.Second)
			proposed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#patch').value`))
			stop()
			require.NoError(t, err)
			assert.JSONEq(t, `{"rows":1000}`, proposed, "Modify starts from the call's arguments")
			inboxDo(t, tab, 20*time.Second,
				chromedp.SendKeys(chromedp.CSS(`#rationale`), "fewer rows"),
				chromedp.SetValue(chromedp.CSS(`#patch`), `{"rows": 10`),
				chromedp.Click(chromedp.CSS(`button[value="modify"]`)),
				chromedp.WaitVisible(chromedp.CSS(`main .error`)))
			assert.Contains(t, inboxText(t, tab, `main .error`), "validation_error: the modified arguments are not valid JSON")
			ctx, stop = context.WithTimeout(tab, 10*time.Second)
			kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#rationale').value`))
			stop()
			require.NoError(t, err)
			assert.Equal(t, "fewer rows", kept, "the comment is kept")
			rec, err = sys.app.Store().HITL().GetInvocation(context.Background(), id)
			require.NoError(t, err)
			assert.Equal(t, store.HITLPending, rec.Status, "nothing was sent")
			inboxDo(t, tab, 20*time.Second, chromedp.SetValue(chromedp.CSS(`#patch`), `{"rows": 10}`),
				chromedp.Click(chromedp.CSS(`button[value="modify"]`)), chromedp.WaitVisible(chromedp.CSS(`#item-outcome`)))
			assert.Equal(t, "Modified", inboxText(t, tab, `#item-state`))
			assert.Contains(t, inboxText(t, tab, `#item-outcome`), `{"rows": 10}`)
			require.NoError(t, inboxCallEnd(t, done), "a modified tool call runs as approved")

			// A decision made through gRPC shows on the open item's page without a reload.
			id, done = inboxElevatedCall(t, sys, caller, `{}`)
			inboxDo(t, tab, 20*time.Second, chromedp.Navigate(base+"inbox/"+url.PathEscape(id)), chromedp.WaitVisible(chromedp.CSS(`#rationale`)))
			time.Sleep(300 * time.Millisecond) // let the event stream connect
			_, err = admin.Decide(operatorContext(), &hitladminpb.DecideRequest{InvocationId: id, Decision: "deny", Rationale: "denied over gRPC"})
			require.NoError(t, err)
			inboxWaitText(t, tab, `#item-state`, "Denied")
			inboxWaitText(t, tab, `#item-audit`, "grpc")
			inboxWaitText(t, tab, `#decide`, "was decided")
			require.Equal(t, codes.PermissionDenied, status.Code(inboxCallEnd(t, done)))

			// Expired: an invocation whose deadline passes shows under Expired with its fallback.
			ctx, stop = context.WithTimeout(context.Background(), 4*time.Second) // the invocation's deadline: 3 s
			_, err = hitlpb.NewHitlServiceClient(caller.Conn()).Decide(ctx, &hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL,
				Context: []byte(`{"facts":["asks for production credentials"]}`), ProposedActions: []string{"approve", "deny"}, Priority: -3})
			stop()
			require.NoError(t, err, "the fallback answers before the call's deadline")
			inboxDo(t, tab, 20*time.Second, chromedp.Navigate(base+"inbox?tab=expired&reason=SECURITY_APPROVAL"), chromedp.WaitVisible(chromedp.CSS(`tr[data-invocation]`)))
			expired := inboxText(t, tab, `tr[data-invocation]`)
			assert.Contains(t, expired, "Expired: Denied by fallback")
			assert.Contains(t, expired, "DENY_BY_DEFAULT applied (deadline): deny")
			consoleScreenshot(t, tab, "inbox-expired-"+kind)
			inboxDo(t, tab, 20*time.Second, chromedp.Click(chromedp.CSS(`tr[data-invocation] th a`)), chromedp.WaitVisible(chromedp.CSS(`#item-fallback`)))
			assert.Contains(t, inboxText(t, tab, `#item-fallback`), "DENY_BY_DEFAULT (deadline)")
		})
	}
}

// inboxPost posts a form to a console path with c, as a page of the console does, and
// returns the status, the Location and the body.
func inboxPost(t *testing.T, c *http.Client, base, path string, form url.Values) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", strings.TrimSuffix(base, console.Prefix))
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), b.String()
}

// TestConsoleInboxForms: the inbox without JavaScript on both stores. Filters narrow the
// list; a decision is a plain POST answered with 303 back to the item and a flash message;
// refusals answer 400 with the error code — a modification that is not JSON (nothing is
// sent), a missing comment, an unknown decision — 404 for an unknown invocation, and a second
// decision on a decided invocation 400 naming who decided; repeating the applied one is
// answered again; a deferral refuses a tool call; the fragment, the event stream and a
// decision need a session.
func TestConsoleInboxForms(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := inboxSystem(t, kind)
			caller := dialSigned(t, sys, "form-caller")
			c := consoleClient(t)

			for _, p := range []string{"inbox/list", "inbox/events"} {
				req, err := http.NewRequest(http.MethodGet, base+p, nil)
				require.NoError(t, err)
				req.Header.Set("HX-Request", "true")
				resp, err := c.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, p)
			}
			code, _, _ := inboxPost(t, c, base, "inbox/x/decide", url.Values{"decision": {"approve"}, "rationale": {"no session"}})
			assert.Equal(t, http.StatusUnauthorized, code, "a decision without a session")
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)

			id, done := inboxElevatedCall(t, sys, caller, `{}`)
			code, body := consoleGet(t, c, base+"inbox")
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, `data-invocation="`+id+`"`)
			assert.Contains(t, body, `sse-connect="`+console.Prefix+`inbox/events?fp=`, "the stream starts from what the page shows")
			for q, want := range map[string]bool{
				"reason=TOOL_PRIVILEGE_ESCALATION": true, "reason=CONFLICT": false,
				"correlation=" + strings.TrimPrefix(id, "tool-approval-"): true, "correlation=nope": false,
				"priority=0": true, "priority=-1": false, "due=1h": true, "due=overdue": false,
				"agent=" + caller.ID(): true, "agent=somebody-else": false, "tab=decided": false, "tab=all": true,
			} {
				code, body = consoleGet(t, c, base+"inbox/list?"+q)
				assert.Equal(t, http.StatusOK, code, q)
				assert.Equal(t, want, strings.Contains(body, `data-invocation="`+id+`"`), q)
			}

			path := "inbox/" + url.PathEscape(id) + "/decide"
			for _, tt := range []struct {
				form url.Values
				want string
			}{
				{url.Values{"decision": {"modify"}, "rationale": {"r"}, "patch": {`{"a":`}}, "validation_error: the modified arguments are not valid JSON"},
				{url.Values{"decision": {"modify"}, "rationale": {"r"}, "patch": {"  "}}, "validation_error: modify needs the modified arguments as JSON"},
				{url.Values{"decision": {"approve"}, "rationale": {" "}}, "validation_error: a rationale is required"},
				{url.Values{"decision": {"explode"}, "rationale": {"r"}}, "validation_error: decision &#34;explode&#34; is not one of"},
			} {
				code, _, body := inboxPost(t, c, base, path, tt.form)
				assert.Equal(t, http.StatusBadRequest, code, "%v", tt.form)
				assert.Contains(t, body, tt.want, "%v", tt.form)
			}
			hist, err := hitladminpb.NewHitlAdminServiceClient(dialRaw(t, sys)).History(operatorContext(), &hitladminpb.HistoryRequest{InvocationId: id})
			require.NoError(t, err)
			for _, e := range hist.GetEvents() {
				assert.Equal(t, "hitl.invoked", e.GetType(), "nothing reached the invocation")
			}

			code, _, body = inboxPost(t, c, base, "inbox/no-such-invocation/decide", url.Values{"decision": {"approve"}, "rationale": {"r"}})
			assert.Equal(t, http.StatusNotFound, code)
			assert.Contains(t, body, "unknown invocation")

			code, loc, _ := inboxPost(t, c, base, path, url.Values{"decision": {"approve"}, "rationale": {"without script"}})
			require.Equal(t, http.StatusSeeOther, code)
			assert.True(t, strings.HasPrefix(loc, console.Prefix+"inbox/"+url.PathEscape(id)+"?flash="), loc)
			require.NoError(t, inboxCallEnd(t, done))
			code, body = consoleGet(t, c, strings.TrimSuffix(base, console.Prefix)+loc)
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, "Approved "+id+" (by "+authOperator+" via web)")
			assert.NotContains(t, body, `id="rationale"`, "no form on a decided invocation")

			code, loc, _ = inboxPost(t, c, base, path, url.Values{"decision": {"approve"}, "rationale": {"without script"}})
			assert.Equal(t, http.StatusSeeOther, code, "the same decision again")
			assert.Contains(t, loc, "already")
			code, _, body = inboxPost(t, c, base, path, url.Values{"decision": {"deny"}, "rationale": {"too late"}})
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "was already decided: approve by "+authOperator)

			// Defer hands the question back undecided: for a tool call, a refusal.
			id, done = inboxElevatedCall(t, sys, caller, `{}`)
			code, loc, _ = inboxPost(t, c, base, "inbox/"+url.PathEscape(id)+"/decide", url.Values{"decision": {"defer"}, "rationale": {"ask me tomorrow"}})
			require.Equal(t, http.StatusSeeOther, code)
			assert.Equal(t, codes.PermissionDenied, status.Code(inboxCallEnd(t, done)))
			_, body = consoleGet(t, c, strings.TrimSuffix(base, console.Prefix)+loc)
			assert.Contains(t, body, `id="item-state">Deferred<`)
			_, body = consoleGet(t, c, base+"inbox/list?tab=decided")
			assert.Contains(t, body, `data-invocation="`+id+`"`)
		})
	}
}
