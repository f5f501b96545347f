// Package retention is the approvals example (§15, docs/hitl.md): a data-retention agent,
// janitor, wants to purge a tenant's old customer records — a destructive action it may not
// take on its own. It asks a human through the canonical HitlService.Decide, prints the
// command that decides the question, and waits:
//
//   - approved, it calls the tool records.purge of the records agent, which owns the data,
//     and the records are purged;
//   - denied, deferred, or not decided before the deadline — when the invocation's fallback
//     (§15.3, deny by default) decides — it falls back: it files the purge for review and
//     purges nothing.
//
// Either way it ends by itself and deregisters both agents. Run drives it against a server;
// examples/approvals's main and an end-to-end test both call it.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/tool"
)

// Tool is the tool the records agent provides and janitor calls once approved.
const Tool = "records.purge"

// DefaultServer is the address the printed commands leave out: the CLI's default.
const DefaultServer = "localhost:50051"

// Options tunes Run; the zero value is fine.
type Options struct {
	// Out receives what the agents print; nil means standard output.
	Out io.Writer
	// Wait is how long a human has to decide: the invocation's deadline, after which its
	// fallback decides. Zero means one minute.
	Wait time.Duration
	// Asked, when set, is called with the invocation's id once it waits for a decision (a
	// test decides it from there).
	Asked func(invocationID string)
}

// Purge is what janitor asks to do: records.purge's arguments.
type Purge struct {
	// Tenant owns the records.
	Tenant string `json:"tenant"`
	// OlderThanYears selects the records by age.
	OlderThanYears int `json:"older_than_years"`
}

// Result is what Run saw.
type Result struct {
	// Suffix is the run's unique suffix, part of both agents' ids.
	Suffix string
	// Janitor and Records are the agents' ids; Records is also the tool's provider.
	Janitor, Records string
	// Invocation is the HITL invocation janitor raised (its workflow is hitl/<Invocation>).
	Invocation string
	// Outcome is the invocation's outcome as janitor received it; zero when the call ended
	// without one (janitor's own wait ran out).
	Outcome hitl.Outcome
	// Asked is the purge janitor asked for; Done the one it called for, after a modify
	// decision's patch, when it was approved.
	Asked, Done Purge
	// Approved says the purge was approved and called; FellBack that janitor fell back.
	Approved, FellBack bool
	// CallID is the tool call's id when there was one.
	CallID string
	// Purged is how many records the call purged.
	Purged int
	// Offers are the calls the records agent received, by call id.
	Offers []string
	// Registered are the agents Run registered, in order; Deregistered those it deregistered
	// when it ended.
	Registered, Deregistered []string
}

// rows is the records agent's table: how many records of a tenant are older than a number
// of years. Only acme has old records here.
func rows(p Purge) int {
	if p.Tenant == "acme" && p.OlderThanYears >= 7 {
		return 1204 - 97*(p.OlderThanYears-7)
	}
	return 0
}

// printer writes one line per call, so that the two agents do not interleave.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, "%-20s %s\n", who, fmt.Sprintf(format, args...))
}

func (p *printer) raw(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.out, s)
}

// example is one run.
type example struct {
	server string
	opts   Options
	p      *printer
	res    *Result

	mu     sync.Mutex
	agents []*sdk.Agent

	// serving ends the records agent's stream; served is closed when its reader returned.
	serving context.CancelFunc
	served  chan struct{}
}

// Run registers the two agents at server (host:port), asks for the approval and acts on the
// decision, and deregisters both agents, whatever happened. A denial or a fallback is part
// of the story, not an error: Run returns an error only when the example cannot tell it
// (the server is unreachable, the approved call fails).
func Run(ctx context.Context, server string, opts Options) (*Result, error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Wait <= 0 {
		opts.Wait = time.Minute
	}
	suffix := uuid.NewString()[:8]
	res := &Result{Suffix: suffix, Janitor: "janitor-" + suffix, Records: "records-" + suffix,
		Asked: Purge{Tenant: "acme", OlderThanYears: 7}}
	e := &example{server: server, opts: opts, p: &printer{out: opts.Out}, res: res}
	err := e.story(ctx)
	return res, errors.Join(err, e.close(ctx))
}

// story is the example, top to bottom.
func (e *example) story(ctx context.Context) error {
	res := e.res
	records, err := e.join(ctx, res.Records, "owns the customer records")
	if err != nil {
		return err
	}
	if err := e.provide(ctx, records); err != nil {
		return err
	}
	e.p.say(res.Records, "registered; provides %s", Tool)
	janitor, err := e.join(ctx, res.Janitor, "purges records past their retention")
	if err != nil {
		return err
	}
	e.p.say(res.Janitor, "registered")

	n := rows(res.Asked)
	e.p.say(res.Janitor, "wants to purge %d records of tenant %s older than %d years: that needs a human",
		n, res.Asked.Tenant, res.Asked.OlderThanYears)
	out, decided, err := e.ask(ctx, janitor, n)
	if err != nil {
		return err
	}
	res.Outcome = out
	purge := res.Asked
	switch {
	case !decided:
		e.p.say(res.Janitor, "no decision within %s", e.opts.Wait)
	case out.Fallback:
		e.p.say(res.Janitor, "nobody decided (%s): the fallback %s answered %s", out.FallbackReason, out.FallbackPolicy, out.Decision)
	default:
		e.p.say(res.Janitor, "%s by %s via %s: %s", past(out.Decision), out.DecidedBy, out.Via, out.Rationale)
	}
	approved := decided && (out.Decision == hitl.Approve || out.Decision == hitl.Modify)
	if approved && out.Decision == hitl.Modify {
		// A modify approves the purge as the operator changed it: the patch holds the
		// fields they changed.
		if err := json.Unmarshal(out.Patch, &purge); err != nil {
			e.p.say(res.Janitor, "cannot read the modification (%v): treats it as a denial", err)
			approved = false
		}
	}
	if !approved {
		res.FellBack = true
		e.p.say(res.Janitor, "falls back: files the purge for review and purges nothing")
		return nil
	}

	res.Approved, res.Done = true, purge
	res.CallID = "tool-" + uuid.NewString()
	e.p.say(res.Janitor, "calls %s/%s", res.Records, Tool)
	var got struct {
		Purged int `json:"purged"`
	}
	if err := tool.New(janitor).JSON(ctx, tool.Call{CallID: res.CallID, ProviderID: res.Records, ToolName: Tool, Args: purge}, &got); err != nil {
		return fmt.Errorf("the approved purge failed: %w", err)
	}
	res.Purged = got.Purged
	e.p.say(res.Janitor, "done: %d records purged", got.Purged)
	return nil
}

// ask raises janitor's question with HitlService.Decide and waits for its outcome. decided
// is false when the call ended without one: janitor's own deadline passed first, which it
// treats as the fallback it would have been.
func (e *example) ask(ctx context.Context, janitor *sdk.Agent, n int) (hitl.Outcome, bool, error) {
	res := e.res
	question, err := json.Marshal(hitl.Context{
		Facts: []string{
			fmt.Sprintf("%s asks to purge %d customer records of tenant %s older than %d years", res.Janitor, n, res.Asked.Tenant, res.Asked.OlderThanYears),
			fmt.Sprintf("the purge is the tool %s of %s", Tool, res.Records),
		},
		RiskNotes: []string{"irreversible: the records are deleted, not archived", "a legal hold on the tenant would forbid it"},
	})
	if err != nil {
		return hitl.Outcome{}, false, err
	}
	// Without an idempotency key the call's deadline is the invocation's (less the second
	// the server keeps to answer in): so the human has Wait, and then the fallback decides.
	wctx, cancel := context.WithTimeout(ctx, e.opts.Wait+time.Second)
	defer cancel()
	call, err := decide(wctx, janitor.ClientConn(), &hitlpb.HitlInvocation{
		ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL, Context: question,
		ProposedActions: []string{"approve", "deny"}, Priority: 5,
	})
	if err != nil {
		return hitl.Outcome{}, false, fmt.Errorf("asking for approval (is the server running? `make dev`): %w", err)
	}
	res.Invocation = call.id
	server := ""
	if e.server != DefaultServer {
		server = " --server " + e.server
	}
	e.p.say(res.Janitor, "asked for approval: HITL invocation %s (SECURITY_APPROVAL)", call.id)
	e.p.say(res.Janitor, "waits up to %s; decide it with (the token of `make dev`):", e.opts.Wait)
	e.p.raw(fmt.Sprintf("\n    export SW4RM_OPERATOR_TOKEN=sw4rm-dev-token\n"+
		"    bin/sw4rm hitl decide%s %s approve --rationale \"past retention, no legal hold\"\n"+
		"    bin/sw4rm hitl decide%s %s deny --rationale \"acme is under legal hold\"\n\n", server, call.id, server, call.id))
	if e.opts.Asked != nil {
		e.opts.Asked(call.id)
	}
	dec, err := call.wait()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return hitl.Outcome{}, false, ctx.Err()
	case status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Unavailable:
		// The outcome did not reach janitor in time (a deployment whose fallback extends the
		// deadline, or a server that lost the wait): the invocation is the server's to end.
		return hitl.Outcome{}, false, nil
	default:
		return hitl.Outcome{}, false, fmt.Errorf("waiting for invocation %s: %w", call.id, err)
	}
	var out hitl.Outcome
	if err := json.Unmarshal(dec.GetDecisionPayload(), &out); err != nil {
		return hitl.Outcome{}, false, fmt.Errorf("the outcome of invocation %s: %w", call.id, err)
	}
	return out, true, nil
}

// pending is a Decide call under way.
type pending struct {
	id string
	cs grpc.ClientStream
}

// decide calls HitlService.Decide and returns once the invocation is raised. Decide answers
// only when the invocation is decided, but its response header names the invocation at
// once: the call is made as a stream, whose header can be read before the answer, so that
// janitor can print the command that decides it while it waits.
func decide(ctx context.Context, conn grpc.ClientConnInterface, req *hitlpb.HitlInvocation) (*pending, error) {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Decide"}, hitlpb.HitlService_Decide_FullMethodName)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(req); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	md, err := cs.Header()
	if ids := md.Get(wire.HITLInvocationIDHeader); err == nil && len(ids) == 1 {
		return &pending{id: ids[0], cs: cs}, nil
	}
	// No header: the call was refused; its status says why.
	var dec hitlpb.HitlDecision
	if rerr := cs.RecvMsg(&dec); rerr != nil {
		return nil, rerr
	}
	return nil, errors.New("HitlService.Decide named no invocation")
}

// wait returns Decide's answer.
func (p *pending) wait() (*hitlpb.HitlDecision, error) {
	var dec hitlpb.HitlDecision
	if err := p.cs.RecvMsg(&dec); err != nil {
		return nil, err
	}
	return &dec, nil
}

// past is an action as a verb in the past tense.
func past(a hitl.Action) string {
	switch a {
	case hitl.Approve:
		return "approved"
	case hitl.Deny:
		return "denied"
	case hitl.Modify:
		return "approved with changes"
	case hitl.Defer:
		return "deferred"
	}
	return string(a)
}

// join registers agent id through RegistryService.
func (e *example) join(ctx context.Context, id, description string) (*sdk.Agent, error) {
	a, err := sdk.Dial(e.server, id)
	if err != nil {
		return nil, err
	}
	d := &registrypb.AgentDescriptor{Name: strings.TrimSuffix(id, "-"+e.res.Suffix), Description: "approvals example: " + description}
	if err := a.Register(ctx, d); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("register %s (is the server running? `make dev`): %w", id, err)
	}
	e.mu.Lock()
	e.agents = append(e.agents, a)
	e.res.Registered = append(e.res.Registered, id)
	e.mu.Unlock()
	return a, nil
}

// provide registers records.purge as a tool of the records agent (ConnectorService) and
// serves its calls from the agent's message stream (TOOL_CALL envelopes, §18.2).
func (e *example) provide(ctx context.Context, records *sdk.Agent) error {
	resp, err := connectorpb.NewConnectorServiceClient(records.ClientConn()).RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
		ProviderId: records.ID(), Tools: []*connectorpb.ToolDescriptor{{
			ToolName: Tool,
			InputSchema: `{"type":"object","properties":{"tenant":{"type":"string"},"older_than_years":{"type":"integer","minimum":1}},` +
				`"required":["tenant","older_than_years"],"additionalProperties":false}`,
			SideEffects: "write",
		}},
	})
	if err != nil {
		return fmt.Errorf("register %s's tool: %w", records.ID(), err)
	}
	if !resp.GetOk() {
		return fmt.Errorf("register %s's tool: %s", records.ID(), resp.GetReason())
	}
	sctx, cancel := context.WithCancel(ctx)
	in, err := records.Receive(sctx)
	if err != nil {
		cancel()
		return err
	}
	e.serving, e.served = cancel, make(chan struct{})
	p := tool.NewProvider(records)
	go func() {
		defer close(e.served)
		for {
			d, err := in.Next()
			if err != nil {
				return
			}
			_, _ = d.Confirm(sctx)
			o, ok, err := tool.ParseOffer(d.Envelope)
			if !ok {
				continue
			}
			e.mu.Lock()
			e.res.Offers = append(e.res.Offers, o.CallID)
			e.mu.Unlock()
			var purge Purge
			if err == nil {
				err = json.Unmarshal(o.Args, &purge)
			}
			if err != nil {
				_ = p.Fail(sctx, o.CallID, "VALIDATION_ERROR", err.Error())
				continue
			}
			n := rows(purge)
			e.p.say(records.ID(), "purged %d records of tenant %s older than %d years (asked by %s)", n, purge.Tenant, purge.OlderThanYears, o.Caller)
			if err := p.Result(sctx, o.CallID, "application/json", fmt.Appendf(nil, `{"purged":%d}`, n)); err != nil {
				e.p.say(records.ID(), "answering %s failed: %v", o.CallID, err)
			}
		}
	}()
	return nil
}

// close ends the records agent's stream, then deregisters and disconnects both agents, with
// a context of its own: Run's may be cancelled already. It returns the deregistrations that
// failed.
func (e *example) close(ctx context.Context) error {
	if e.serving != nil {
		e.serving()
		<-e.served
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for i := len(e.agents) - 1; i >= 0; i-- {
		a := e.agents[i]
		if err := a.Deregister(cctx, "approvals example finished"); err != nil {
			errs = append(errs, fmt.Errorf("deregister %s: %w", a.ID(), err))
		} else {
			e.res.Deregistered = append(e.res.Deregistered, a.ID())
			e.p.say(a.ID(), "deregistered")
		}
		_ = a.Close()
	}
	e.agents = nil
	return errors.Join(errs...)
}
