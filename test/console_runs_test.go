package test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/console"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// runsGatedNodes is a signed SDK agent that serves DAG nodes as tasks, each node's task waiting
// until the test releases it; the first attempt of the nodes in failFirst fails once
// released.
type runsGatedNodes struct {
	mu        sync.Mutex
	gates     map[string]chan struct{}
	attempts  map[string]int
	failFirst map[string]bool
}

func (g *runsGatedNodes) gate(node string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[node] == nil {
		g.gates[node] = make(chan struct{})
	}
	return g.gates[node]
}

// release lets the node's task (every attempt from now on) finish.
func (g *runsGatedNodes) release(node string) { close(g.gate(node)) }

// serve registers the agent and serves tasks until the test ends; it returns the agent's id.
func (g *runsGatedNodes) serve(t *testing.T, sys *system, workflowID string) string {
	t.Helper()
	a := dialSigned(t, sys, "gated")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Serve(ctx, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
			node := nodeOfTask(run.Task().ID, workflowID)
			select {
			case <-g.gate(node):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			g.mu.Lock()
			g.attempts[node]++
			n := g.attempts[node]
			g.mu.Unlock()
			if g.failFirst[node] && n == 1 {
				return nil, errors.New("the first attempt fails")
			}
			return json.Marshal(map[string]any{"node": node, "attempt": n})
		}, &sdk.ServeOptions{Logf: t.Logf})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	return a.ID()
}

// runsNodeState is the JS expression of a node's state as the picture writes it.
func runsNodeState(node string) string {
	return `(document.querySelector('svg.dag [data-node="` + node + `"]') || {dataset: {}}).dataset.state`
}

// runsNodeFill is the JS expression of the fill colour the picture's box of node has.
func runsNodeFill(node string) string {
	return `getComputedStyle(document.querySelector('svg.dag [data-node="` + node + `"] rect')).fill`
}

// TestConsoleRunsDAGLive: on both stores, in required auth, a DAG run (first → second, first
// → third) whose node completions the test controls: its page draws the run as an SVG graph
// whose boxes change colour and state text live (over SSE, without a reload) as nodes run,
// finish and fail; a failed node is resumed from the page's form and the run completes; each
// node links to its task, whose Temporal run the Tasks page links to; the DAG runs page
// lists the run; the Agents page lists the agent with its state. axe-core finds no serious
// violation on the run's page (the other pages are TestConsoleAccessibility's). Screenshots of
// each page.
func TestConsoleRunsDAGLive(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := consoleSystem(t, kind, auth.Required)
			id := uniq(t, "console-dag")
			g := &runsGatedNodes{gates: map[string]chan struct{}{}, attempts: map[string]int{}, failFirst: map[string]bool{"second": true}}
			agent := g.serve(t, sys, id)
			node := func(nid string, deps ...string) *workflowpb.WorkflowNode {
				return &workflowpb.WorkflowNode{NodeId: nid, AgentId: agent, Dependencies: deps, TriggerType: workflowpb.TriggerType_DEPENDENCY}
			}
			wc := workflowpb.NewWorkflowServiceClient(dialRaw(t, sys))
			ctx := operatorContext()
			_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: &workflowpb.WorkflowDefinition{WorkflowId: id,
				Nodes: map[string]*workflowpb.WorkflowNode{"first": node("first"), "second": node("second", "first"), "third": node("third", "first")}}})
			require.NoError(t, err)
			_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id, WorkflowData: `{}`})
			require.NoError(t, err)

			tab := consoleTab(t, base)
			runURL := base + "dag/" + url.PathEscape(id)
			nav, stop := context.WithTimeout(tab, 30*time.Second)
			require.NoError(t, chromedp.Do(nav, chromedp.Navigate(runURL), chromedp.WaitVisible(chromedp.CSS(`svg.dag`))))
			stop()
			waitPage(t, tab, "first RUNNING", runsNodeState("first")+` === "RUNNING"`)
			// A mark on the window: a reload would lose it, so the changes below arrive live.
			_, err = chromedp.Run(tab, chromedp.Evaluate[any](`window.consoleMark = 1`))
			require.NoError(t, err)
			running, err := chromedp.Run(tab, chromedp.Evaluate[string](runsNodeFill("first")))
			require.NoError(t, err)
			assert.Equal(t, "rgb(254, 249, 195)", running, "a running node is yellow")
			assert.Equal(t, "PENDING", runsEval(t, tab, runsNodeState("second")), "a node whose dependency runs")
			consoleScreenshot(t, tab, "dag-run-running-"+kind)

			g.release("first")
			waitPage(t, tab, "first COMPLETED, without a reload", runsNodeState("first")+` === "COMPLETED" && window.consoleMark === 1`)
			assert.Equal(t, "rgb(220, 252, 231)", runsEval(t, tab, runsNodeFill("first")), "a completed node is green")
			waitPage(t, tab, "second and third RUNNING", runsNodeState("second")+` === "RUNNING" && `+runsNodeState("third")+` === "RUNNING"`)
			// The node's box links to its task.
			href := runsEval(t, tab, `document.querySelector('svg.dag [data-node="first"]').getAttribute("href")`)
			assert.Contains(t, href, "tasks?task="+url.QueryEscape("dag-"+id+"-first-1"))
			temporal := runsEval(t, tab, `document.querySelector('#node-first a[href^="http://temporal-ui.invalid"]').href`)
			assert.Contains(t, temporal, "/workflows/task%2Fdag-"+id+"-first-1")

			g.release("third")
			g.release("second")
			waitPage(t, tab, "second FAILED, the run WAITING", runsNodeState("second")+` === "FAILED" && `+runsNodeState("third")+` === "COMPLETED" && `+
				`document.getElementById("dag-run-state")?.textContent === "WAITING" && window.consoleMark === 1`)
			assert.Equal(t, "rgb(254, 226, 226)", runsEval(t, tab, runsNodeFill("second")), "a failed node is red")
			assert.Contains(t, runsEval(t, tab, `document.querySelector("#node-second").textContent`), "the first attempt fails")
			consoleScreenshot(t, tab, "dag-run-failed-"+kind)

			// Resume the failed node from the page: a plain form, answered with a redirect back.
			act, stop := context.WithTimeout(tab, 30*time.Second)
			require.NoError(t, chromedp.Do(act, chromedp.Click(chromedp.CSS(`#node-second button`)),
				// The page before the click had no flash: a flash is the page after the redirect.
				chromedp.WaitVisible(chromedp.CSS(`#status:not(:empty)`)), chromedp.WaitVisible(chromedp.CSS(`svg.dag`))))
			stop()
			t.Cleanup(func() {
				if t.Failed() {
					st, err := wc.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
					t.Logf("state at failure: %v %v", st, err)
					t.Logf("page at failure: %s", runsEval(t, tab, `document.getElementById("dag-live").innerText`))
				}
			})
			waitPage(t, tab, "the resumed run COMPLETED", runsNodeState("second")+` === "COMPLETED" && document.getElementById("dag-run-state")?.textContent === "COMPLETED"`)
			assert.Contains(t, runsEval(t, tab, `document.getElementById("status").textContent`), "Resumed "+id+" from node second")
			assert.Equal(t, 2, g.attempts["second"])
			consoleScreenshot(t, tab, "dag-run-completed-"+kind)
			assert.Empty(t, consoleAxe(t, tab), "axe-core on the run's page: no serious or critical violation")

			// The Tasks page lists the node's task with its Temporal run.
			c := consoleClient(t)
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)
			code, body := consoleGet(t, c, base+"tasks?agent="+url.QueryEscape(agent))
			require.Equal(t, http.StatusOK, code, body)
			assert.Contains(t, body, "dag-"+id+"-second-2")
			assert.Contains(t, body, "http://temporal-ui.invalid/namespaces/default/workflows/task%2Fdag-"+id+"-second-2")
			code, body = consoleGet(t, c, base+"tasks?state=bogus")
			assert.Equal(t, http.StatusBadRequest, code, "a bad state filter")
			assert.Contains(t, body, "validation_error")
			runsBrowse(t, tab, base+"tasks?agent="+url.QueryEscape(agent), `table.tasks`)
			consoleScreenshot(t, tab, "tasks-"+kind)

			// The DAG runs page lists the run (Temporal's visibility may show it a moment late).
			require.Eventually(t, func() bool {
				_, body := consoleGet(t, c, base+"dag?prefix="+url.QueryEscape(id))
				return strings.Contains(body, `href="`+console.Prefix+"dag/"+url.PathEscape(id)+`"`) && strings.Contains(body, ">COMPLETED<")
			}, 20*time.Second, 200*time.Millisecond, "the run listed as COMPLETED")
			runsBrowse(t, tab, base+"dag", `table.dagruns`)
			consoleScreenshot(t, tab, "dag-runs-"+kind)

			// The Agents page lists the agent with its lifecycle state.
			runsBrowse(t, tab, base+"agents", `table.agents`)
			row := runsEval(t, tab, `document.getElementById("agent-`+agent+`").textContent`)
			assert.Regexp(t, `RUNNABLE|RUNNING|SCHEDULED`, row)
			assert.Regexp(t, `healthy|none yet|stale`, row, "the heartbeat's health in words")
			consoleScreenshot(t, tab, "agents-"+kind)
		})
	}
}

// runsEval evaluates a JS expression of a string in the tab.
func runsEval(t *testing.T, tab context.Context, expr string) string {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, 10*time.Second)
	defer stop()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	require.NoError(t, err, expr)
	return s
}

// browse navigates the tab to u and waits for sel.
func runsBrowse(t *testing.T, tab context.Context, u, sel string) {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, 30*time.Second)
	defer stop()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS(sel))))
}

// runsPost posts form to a console path with c and returns the status, Location and body.
func runsPost(t *testing.T, c *http.Client, u string, form url.Values) (int, string, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// TestConsoleAgentsShutdown: on both stores, in required auth, without script: the Agents
// page lists a registered agent with its state and confirmation-guarded forms; a shutdown
// form without confirm=yes answers a confirmation page and changes nothing; the confirmed
// one requests the shutdown and redirects back with a flash, and the agent moves to
// SHUTTING_DOWN. Bad input is refused with the spec's error_code: a negative grace period
// (validation_error, 400), an unknown agent (no_route, 404), a resume without a node
// (validation_error, 400) or of a workflow that has no run (no_route, 404).
func TestConsoleAgentsShutdown(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := consoleSystem(t, kind, auth.Required)
			a := dialSigned(t, sys, "victim")
			openInbox(t, a.Agent)
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			c := consoleClient(t)
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)

			code, body := consoleGet(t, c, base+"agents")
			require.Equal(t, http.StatusOK, code, body)
			assert.Contains(t, body, `id="agent-`+a.ID()+`"`)
			assert.Contains(t, body, `<span class="state ok">RUNNABLE</span>`)
			assert.Contains(t, body, `data-confirm="Shut down `+a.ID()+`?`)
			assert.Contains(t, body, `<noscript><input type="hidden" name="confirm" value="ask"></noscript>`)
			code, body = consoleGet(t, c, base+"agents?state=RUNNABLE")
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, a.ID())

			shutdown := base + "agents/" + url.PathEscape(a.ID()) + "/shutdown"
			code, _, body = runsPost(t, c, shutdown, url.Values{"confirm": {"ask", "yes"}})
			assert.Equal(t, http.StatusOK, code, "the confirmation step")
			assert.Contains(t, body, `<input type="hidden" name="confirm" value="yes">`)
			assert.Contains(t, body, `<label for="grace">`)
			code, _, _ = runsPost(t, c, base+"agents/"+url.PathEscape(a.ID())+"/preempt", url.Values{})
			assert.Equal(t, http.StatusOK, code, "the preemption's confirmation step")
			_, body = consoleGet(t, c, base+"agents")
			assert.Contains(t, body, `<span class="state ok">RUNNABLE</span>`, "nothing was requested yet")

			code, _, body = runsPost(t, c, shutdown, url.Values{"confirm": {"yes"}, "grace_seconds": {"-5"}})
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error")
			code, _, body = runsPost(t, c, base+"agents/nobody-here/shutdown", url.Values{"confirm": {"yes"}})
			assert.Equal(t, http.StatusNotFound, code)
			assert.Contains(t, body, "no_route")
			code, _, body = runsPost(t, c, base+"dag/no-such-workflow/resume", url.Values{})
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, body, "validation_error")
			code, _, body = runsPost(t, c, base+"dag/no-such-workflow/resume", url.Values{"node_id": {"x"}})
			assert.Equal(t, http.StatusNotFound, code, body)
			assert.Contains(t, body, "no_route")

			code, loc, body := runsPost(t, c, shutdown, url.Values{"confirm": {"yes"}, "grace_seconds": {"20"}})
			require.Equal(t, http.StatusSeeOther, code, body)
			require.True(t, strings.HasPrefix(loc, console.Prefix+"agents?flash="), loc)
			_, body = consoleGet(t, c, "http://"+sys.app.HTTPAddr()+loc)
			assert.Contains(t, body, "Shutdown of "+a.ID()+" requested.")
			require.Eventually(t, func() bool {
				_, body := consoleGet(t, c, base+"agents?state=SHUTTING_DOWN")
				return strings.Contains(body, `id="agent-`+a.ID()+`"`)
			}, 15*time.Second, 100*time.Millisecond, "the agent SHUTTING_DOWN")
		})
	}
}

// TestConsoleAgentsDispatchAndBuffer: on both stores, in required auth, the Agents page
// shows what an agent's scheduler holds — the running task with its priority and a queued
// task of lower priority with its own — in a headless browser, and the inbound buffer of an
// agent that does not stream as depth / capacity with a word, which changes as messages are
// sent to it: ok below three quarters, filling from there, full at capacity. The depth
// counts control traffic too (the registration's notification), which the capacity does not
// limit.
func TestConsoleAgentsDispatchAndBuffer(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, base := consoleSystem(t, kind, auth.Required, func(c *app.Config) { c.BufferCapacity = 4 })
			worker := dialSigned(t, sys, "worker")
			first, second := uniq(t, "first"), uniq(t, "second")
			release := make(chan struct{})
			serve(t, worker.Agent, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return []byte(`{}`), nil
			})
			waitState(t, sys, worker.ID(), commonpb.AgentState_RUNNABLE)
			sc := schedulerpb.NewSchedulerServiceClient(worker.Conn())
			require.True(t, submit(t, sc, worker.ID(), first, 5, "repo:console resource:first").GetAccepted())
			waitTask(t, sys, first, workflows.TaskRunning)
			// Priority 7 ranks below the running 5: it queues without preempting (§7.1).
			require.True(t, submit(t, sc, worker.ID(), second, 7, "repo:console resource:second").GetAccepted())
			t.Cleanup(func() { close(release) })

			sender := dialSigned(t, sys, "sender")
			idle := dialSigned(t, sys, "idle") // registered, never streams: nothing confirms its messages
			c := consoleClient(t)
			require.Equal(t, http.StatusSeeOther, consoleSignIn(t, c, base, authOperatorToken).StatusCode)
			buffer := func() string {
				t.Helper()
				code, body := consoleGet(t, c, base+"agents")
				require.Equal(t, http.StatusOK, code, body)
				i := strings.Index(body, `id="agent-`+idle.ID()+`"`)
				require.GreaterOrEqual(t, i, 0, "the idle agent is listed")
				j := strings.Index(body[i:], `class="agent-buffer"`)
				require.GreaterOrEqual(t, j, 0)
				cell := body[i+j:]
				return cell[:strings.Index(cell, "</td>")]
			}
			// The registry's notification to the new agent is control traffic, which the
			// capacity does not count (§13), so neither does the page.
			assert.Contains(t, buffer(), `0 / 4</span> <span class="state ok">ok</span>`, "control traffic is not counted")
			ctx := context.Background()
			for i := range 3 {
				_, err := sender.Send(ctx, sdk.Message{To: idle.ID(), Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
				require.NoError(t, err)
			}
			assert.Contains(t, buffer(), `3 / 4</span> <span class="state warn">filling</span>`, "three quarters")
			_, err := sender.Send(ctx, sdk.Message{To: idle.ID(), Payload: []byte(`{"n":3}`)})
			require.NoError(t, err)
			assert.Contains(t, buffer(), `4 / 4</span> <span class="state bad">full</span>`, "at capacity")
			_, err = sender.Send(ctx, sdk.Message{To: idle.ID(), Payload: []byte(`{"n":4}`)})
			require.ErrorContains(t, err, "buffer_full", "full on the page is what the router refuses")

			tab := consoleTab(t, base)
			row := `document.getElementById("agent-` + worker.ID() + `")`
			require.Eventually(t, func() bool {
				runsBrowse(t, tab, base+"agents", `table.agents`)
				return strings.Contains(runsEval(t, tab, row+`.querySelector(".agent-queue")?.textContent || ""`), second)
			}, 20*time.Second, 300*time.Millisecond, "the queued task listed")
			assert.Equal(t, "running: "+first+" (priority 5)", strings.TrimSpace(runsEval(t, tab, row+`.querySelector(".agent-running").textContent`)))
			assert.Equal(t, second+" (priority 7)", strings.TrimSpace(runsEval(t, tab, row+`.querySelector(".agent-queue li").textContent`)))
			assert.Contains(t, runsEval(t, tab, row+`.textContent`), "queued (1)")
			assert.Contains(t, runsEval(t, tab, `document.getElementById("agent-`+idle.ID()+`").querySelector(".agent-buffer").textContent`), "4 / 4 full")
			assert.NotContains(t, runsEval(t, tab, `document.body.textContent`), "not exposed")
			consoleScreenshot(t, tab, "agents-dispatch-"+kind)
		})
	}
}
