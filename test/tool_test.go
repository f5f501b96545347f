package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// fakeProvider is a provider the test controls: "echo" answers its arguments; "ticks"
// emits {"tick": n} every tick_ms until n reaches count or ctx ends. It counts attempts.
type fakeProvider struct {
	attempts atomic.Int64
	// running and maxRunning count the calls of "serial" running at once.
	running, maxRunning atomic.Int64
}

func (f *fakeProvider) Descriptors() []*connectorpb.ToolDescriptor {
	return []*connectorpb.ToolDescriptor{
		{ToolName: "echo", InputSchema: `{"type":"object"}`, Idempotent: true, SideEffects: "none"},
		{ToolName: "ticks", InputSchema: `{"type":"object","properties":{"count":{"type":"integer","minimum":0},"tick_ms":{"type":"integer","minimum":1}},"required":["count"]}`,
			Idempotent: true, SideEffects: "none"},
		{ToolName: "write_once", InputSchema: `{"type":"object"}`, SideEffects: "write"},
		{ToolName: "in_worktree", InputSchema: `{"type":"object"}`, SideEffects: "write", NeedsWorktree: true},
		{ToolName: "serial", InputSchema: `{"type":"object"}`, Idempotent: true, SideEffects: "none", MaxConcurrency: 1},
	}
}

func (f *fakeProvider) Call(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	f.attempts.Add(1)
	switch req.ToolName {
	case "echo", "write_once", "in_worktree":
		return tools.Result{ContentType: "application/json", Data: req.Args}, nil
	case "serial":
		n := f.running.Add(1)
		defer f.running.Add(-1)
		for {
			m := f.maxRunning.Load()
			if n <= m || f.maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(150 * time.Millisecond)
		return tools.Result{ContentType: "application/json", Data: []byte(`{}`)}, nil
	case "ticks":
		var a struct {
			Count  int `json:"count"`
			TickMs int `json:"tick_ms"`
		}
		if err := json.Unmarshal(req.Args, &a); err != nil {
			return tools.Result{}, tool.Errorf(tool.CodeValidation, "%v", err)
		}
		if a.TickMs == 0 {
			a.TickMs = 20
		}
		for n := 1; n <= a.Count; n++ {
			select {
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return tools.Result{}, tool.Errorf(tool.CodeToolTimeout, "deadline")
				}
				return tools.Result{}, tool.Errorf(tool.CodeCancelled, "cancelled")
			case <-time.After(time.Duration(a.TickMs) * time.Millisecond):
			}
			if err := emit(ctx, "application/json", fmt.Appendf(nil, `{"tick":%d}`, n)); err != nil {
				return tools.Result{}, err
			}
		}
		return tools.Result{ContentType: "application/json", Data: fmt.Appendf(nil, `{"ticks":%d}`, a.Count)}, nil
	}
	return tools.Result{}, tool.Errorf(tool.CodeNotFound, "no tool %s", req.ToolName)
}

// toolSystem starts a system in required authentication mode with the fake provider "fake".
func toolSystem(t *testing.T, kind string) (*system, *fakeProvider) {
	cfg := authConfig(t, kind, auth.Required)
	fp := &fakeProvider{}
	cfg.ToolExecutors = map[string]tools.Executor{"fake": fp}
	return start(t, cfg), fp
}

func summaryOf(t *testing.T, f *toolpb.ToolFrame) tool.Summary {
	t.Helper()
	var s tool.Summary
	require.NoError(t, json.Unmarshal(f.GetSummary(), &s), "summary %q", f.GetSummary())
	return s
}

// TestToolCallByNameAlone: on both stores, a call that names only its tool, as the published
// SDKs call, runs on the one provider that offers it and is recorded under it; a name two
// providers offer (the test's "fake" and the built-in provider both have "echo") is refused
// VALIDATION_ERROR naming both, and a name nobody offers NOT_FOUND.
func TestToolCallByNameAlone(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := toolSystem(t, kind)
			ctx := context.Background()
			tc := toolpb.NewToolServiceClient(dialSigned(t, sys, "caller").Conn())

			f, err := tc.Call(ctx, &toolpb.ToolCall{ToolName: "ticks", Args: []byte(`{"count":1,"tick_ms":1}`)})
			require.NoError(t, err)
			assert.Equal(t, "ok", summaryOf(t, f).Status)
			rec, err := sys.app.Store().ToolCalls().GetCall(ctx, f.GetCallId())
			require.NoError(t, err)
			assert.Equal(t, "fake", rec.ProviderID, "recorded under the provider that ran it")

			var trailer metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ToolName: "echo", Args: []byte(`{}`)}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), tools.BuiltinProviderID+", fake")

			_, err = tc.Call(ctx, &toolpb.ToolCall{ToolName: "no.such.tool", Args: []byte(`{}`)}, grpc.Trailer(&trailer))
			require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
			assert.Equal(t, []string{"NOT_FOUND"}, trailer.Get(wire.ToolErrorCodeTrailer))
		})
	}
}

// TestToolCallOverGRPC covers ToolService (§18.2, §18.3, §18.6) over gRPC on both stores:
// a call answers its final frame; a streamed call's frames arrive in order and end with the
// final frame; a stream resumed with sw4rm-resume-after continues after the given frame; a
// cancel mid-stream answers CANCELLED and the stream ends with a final frame whose summary
// marks the cancellation and its partial results; a second cancel is ALREADY_COMPLETED, an
// unknown one NOT_FOUND; bad arguments are VALIDATION_ERROR, an unknown tool NOT_FOUND, a
// timeout TOOL_TIMEOUT; and another agent may neither resume nor cancel the call.
func TestToolCallOverGRPC(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := toolSystem(t, kind)
			ctx := context.Background()
			agent := dialSigned(t, sys, "caller")
			other := dialSigned(t, sys, "other")
			tc := toolpb.NewToolServiceClient(agent.Conn())
			oc := toolpb.NewToolServiceClient(other.Conn())

			// Call: the final frame is the result, with an ok summary.
			var hdr metadata.MD
			f, err := tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "echo", Args: []byte(`{"x":1}`)}, grpc.Header(&hdr))
			require.NoError(t, err)
			assert.True(t, f.GetFinal())
			assert.JSONEq(t, `{"x":1}`, string(f.GetData()))
			assert.Equal(t, "ok", summaryOf(t, f).Status)
			require.Len(t, hdr.Get(wire.CallIDHeader), 1)
			assert.Equal(t, hdr.Get(wire.CallIDHeader)[0], f.GetCallId(), "the scheduler assigns the call_id (§18.2)")
			assert.Regexp(t, `^tool-`, f.GetCallId())

			// The end also as a TOOL_RESULT envelope to the caller (§18.2), and a failure as a
			// TOOL_ERROR.
			rctx := metadata.AppendToOutgoingContext(ctx, wire.ToolReplyKey, "envelope", wire.CorrelationIDKey, "corr-1")
			f, err = tc.Call(rctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "echo", Args: []byte(`{"y":2}`)})
			require.NoError(t, err)
			errID := uniq(t, "err")
			_, err = tc.Call(rctx, &toolpb.ToolCall{CallId: errID, ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":50,"tick_ms":50}`),
				Policy: &toolpb.ExecutionPolicy{Timeout: durationpb.New(200 * time.Millisecond)}})
			require.Error(t, err)
			in, err := agent.Receive(ctx)
			require.NoError(t, err)
			got := map[string]*commonpb.Envelope{}
			for got[activities.ToolReplyMessageID(f.GetCallId())] == nil || got[activities.ToolReplyMessageID(errID)] == nil {
				d, err := in.Next()
				require.NoError(t, err)
				got[d.Envelope.GetMessageId()] = d.Envelope
			}
			in.Close()
			res := got[activities.ToolReplyMessageID(f.GetCallId())]
			require.NotNil(t, res, "%v", got)
			assert.Equal(t, commonpb.MessageType_TOOL_RESULT, res.GetMessageType())
			assert.Equal(t, "corr-1", res.GetCorrelationId())
			var rp tool.ResultPayload
			require.NoError(t, json.Unmarshal(res.GetPayload(), &rp))
			assert.Equal(t, "OK", rp.Status)
			assert.JSONEq(t, `{"y":2}`, string(rp.ResultB64))
			te := got[activities.ToolReplyMessageID(errID)]
			require.NotNil(t, te, "%v", got)
			assert.Equal(t, commonpb.MessageType_TOOL_ERROR, te.GetMessageType())
			var ep tool.ErrorPayload
			require.NoError(t, json.Unmarshal(te.GetPayload(), &ep))
			assert.Equal(t, "TOOL_TIMEOUT", ep.ErrorCode)

			// CallStream: frames in order, the final one last.
			st, err := tc.CallStream(ctx, &toolpb.ToolCall{CallId: uniq(t, "stream"), ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":3}`)})
			require.NoError(t, err)
			frames := drain(t, st)
			require.Len(t, frames, 4)
			for i, fr := range frames {
				assert.Equal(t, uint64(i+1), fr.GetFrameNo())
			}
			assert.JSONEq(t, `{"tick":2}`, string(frames[1].GetData()))
			assert.True(t, frames[3].GetFinal())
			sum := summaryOf(t, frames[3])
			assert.Equal(t, "ok", sum.Status)
			assert.Equal(t, uint64(3), sum.Frames)

			// Resume: read two frames, drop the stream, resume after frame 2.
			callID := uniq(t, "resume")
			sctx, stop := context.WithCancel(ctx)
			st, err = tc.CallStream(sctx, &toolpb.ToolCall{CallId: callID, ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":6,"tick_ms":100}`)})
			require.NoError(t, err)
			for want := uint64(1); want <= 2; want++ {
				fr, err := st.Recv()
				require.NoError(t, err)
				require.Equal(t, want, fr.GetFrameNo())
			}
			stop()
			_, err = recvErr(oc, callID)
			assert.Equal(t, codes.PermissionDenied, status.Code(err), "another agent may not resume the call: %v", err)
			rst, err := tc.CallStream(metadata.AppendToOutgoingContext(ctx, wire.ResumeAfterKey, "2"), &toolpb.ToolCall{CallId: callID})
			require.NoError(t, err)
			rest := drain(t, rst)
			require.NotEmpty(t, rest)
			assert.Equal(t, uint64(3), rest[0].GetFrameNo(), "resumed after frame 2")
			assert.True(t, rest[len(rest)-1].GetFinal())
			assert.Equal(t, uint64(7), rest[len(rest)-1].GetFrameNo())

			// Cancel mid-stream.
			callID = uniq(t, "cancel")
			st, err = tc.CallStream(ctx, &toolpb.ToolCall{CallId: callID, ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":1000,"tick_ms":20}`)})
			require.NoError(t, err)
			first, err := st.Recv()
			require.NoError(t, err)
			require.Equal(t, uint64(1), first.GetFrameNo())
			_, err = oc.Cancel(ctx, &toolpb.ToolCall{CallId: callID})
			assert.Equal(t, codes.PermissionDenied, status.Code(err), "another agent may not cancel: %v", err)
			ans, err := tc.Cancel(ctx, &toolpb.ToolCall{CallId: callID})
			require.NoError(t, err)
			assert.Equal(t, string(tool.CodeCancelled), ans.GetErrorCode(), ans.GetMessage())
			rest = drain(t, st)
			recordHistory(t, sys.app.Temporal(), workflows.ToolWorkflowID(callID), "tool_cancelled_"+kind)
			last := rest[len(rest)-1]
			require.True(t, last.GetFinal())
			sum = summaryOf(t, last)
			assert.Equal(t, "cancelled", sum.Status)
			assert.True(t, sum.Partial)
			assert.Equal(t, last.GetFrameNo()-1, sum.Frames, "the partial results are the frames before the final one")
			ans, err = tc.Cancel(ctx, &toolpb.ToolCall{CallId: callID})
			require.NoError(t, err)
			assert.Equal(t, string(tool.CodeAlreadyCompleted), ans.GetErrorCode())
			ans, err = tc.Cancel(ctx, &toolpb.ToolCall{CallId: uniq(t, "nope")})
			require.NoError(t, err)
			assert.Equal(t, string(tool.CodeNotFound), ans.GetErrorCode())

			// Refusals with the §18.3 codes.
			var trailer metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":"x"}`)}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), "/count")
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "nope"}, grpc.Trailer(&trailer))
			require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
			assert.Equal(t, []string{"NOT_FOUND"}, trailer.Get(wire.ToolErrorCodeTrailer))
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":100,"tick_ms":50}`),
				Policy: &toolpb.ExecutionPolicy{Timeout: durationpb.New(300 * time.Millisecond)}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			assert.Equal(t, []string{"TOOL_TIMEOUT"}, trailer.Get(wire.ToolErrorCodeTrailer))
			details := status.Convert(err).Details()
			require.Len(t, details, 1)
			terr, ok := details[0].(*toolpb.ToolError)
			require.True(t, ok, "%T", details[0])
			assert.Equal(t, "TOOL_TIMEOUT", terr.GetErrorCode())
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":100,"tick_ms":50}`),
				Policy: &toolpb.ExecutionPolicy{BudgetWallMs: 300}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			assert.Equal(t, []string{"WALL_TIMEOUT"}, trailer.Get(wire.ToolErrorCodeTrailer))
		})
	}
}

// drain reads a stream to its end and checks that it ended cleanly after a final frame.
func drain(t *testing.T, st grpc.ServerStreamingClient[toolpb.ToolFrame]) []*toolpb.ToolFrame {
	t.Helper()
	var out []*toolpb.ToolFrame
	for {
		f, err := st.Recv()
		if errors.Is(err, io.EOF) {
			require.NotEmpty(t, out)
			require.True(t, out[len(out)-1].GetFinal(), "the final frame ends the stream")
			return out
		}
		require.NoError(t, err)
		out = append(out, f)
	}
}

func recvErr(c toolpb.ToolServiceClient, callID string) (*toolpb.ToolFrame, error) {
	st, err := c.CallStream(metadata.AppendToOutgoingContext(context.Background(), wire.ResumeAfterKey, "0"), &toolpb.ToolCall{CallId: callID})
	if err != nil {
		return nil, err
	}
	return st.Recv()
}

// TestToolPolicyOverGRPC covers the rest of the execution policy (§18.3, §18.5) on both
// stores: a PRIVILEGED call waits in HITL with reason TOOL_PRIVILEGE_ESCALATION and runs
// once an operator approves it, or is PERMISSION_DENIED when one denies it; a pre-approved
// tool runs at once; retries asked for a non-idempotent tool are dropped with a note; and a
// tool that needs a worktree is refused WORKTREE_NOT_BOUND to an unbound caller (§16).
func TestToolPolicyOverGRPC(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := hitlConfig(t, kind)
			fp := &fakeProvider{}
			cfg.ToolExecutors = map[string]tools.Executor{"fake": fp, "trusted": fp}
			cfg.ToolPreApproved = "trusted/*"
			sys := start(t, cfg)
			ctx := context.Background()
			tc := toolpb.NewToolServiceClient(dialRaw(t, sys))
			privileged := &toolpb.ExecutionPolicy{PrivilegeLevel: "PRIVILEGED"}

			call := func(id string) chan error {
				done := make(chan error, 1)
				go func() {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
					defer cancel()
					_, err := tc.Call(cctx, &toolpb.ToolCall{CallId: id, ProviderId: "fake", ToolName: "echo", Args: []byte(`{}`), Policy: privileged})
					done <- err
				}()
				return done
			}
			approvedID := uniq(t, "approved")
			done := call(approvedID)
			hitlID := pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, approvedID)
			select {
			case err := <-done:
				t.Fatalf("the privileged call ran before any decision: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			out, err := runCLI(t, sys, "alice-token", "decide", hitlID, "approve", "--rationale", "one-off")
			require.NoError(t, err, out)
			require.NoError(t, <-done, "the approved call runs")
			recordHistory(t, sys.app.Temporal(), workflows.ToolWorkflowID(approvedID), "tool_privileged_approved_"+kind)

			deniedID := uniq(t, "denied")
			done = call(deniedID)
			hitlID = pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, deniedID)
			out, err = runCLI(t, sys, "alice-token", "decide", hitlID, "deny", "--rationale", "no")
			require.NoError(t, err, out)
			err = <-done
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "PERMISSION_DENIED: the privilege escalation was refused by")

			// Pre-approved by the deployment's policy: no wait.
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "trusted", ToolName: "echo", Args: []byte(`{}`), Policy: privileged})
			require.NoError(t, err)

			// Retries are never given to a non-idempotent tool (§18.3), and the caller is told.
			var hdr metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "fake", ToolName: "write_once", Args: []byte(`{}`),
				Policy: &toolpb.ExecutionPolicy{MaxRetries: 3}}, grpc.Header(&hdr))
			require.NoError(t, err)
			require.Len(t, hdr.Get(wire.ToolPolicyNoteHeader), 1)
			assert.Contains(t, hdr.Get(wire.ToolPolicyNoteHeader)[0], "not idempotent")

			// A tool that needs a worktree, for an agent that is not bound.
			var trailer metadata.MD
			_, err = tc.Call(metadata.AppendToOutgoingContext(ctx, wire.AgentIDKey, uniq(t, "unbound")),
				&toolpb.ToolCall{ProviderId: "fake", ToolName: "in_worktree", Args: []byte(`{}`)}, grpc.Trailer(&trailer))
			// §16: "Tools with needs_worktree=true MUST fail with error code worktree_not_bound".
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			assert.Equal(t, []string{"WORKTREE_NOT_BOUND"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), "not bound")
		})
	}
}

// pendingInvocation waits for the pending HITL invocation of the given reason whose
// correlation is the call, and returns its id.
func pendingInvocation(t *testing.T, sys *system, reason commonpb.HitlReasonType, correlation string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		recs, err := sys.app.Store().HITL().ListInvocations(context.Background(), store.HITLFilter{Status: store.HITLPending, ReasonType: reason.String()})
		if err != nil {
			return false
		}
		for _, r := range recs {
			if r.CorrelationID == correlation {
				id = r.InvocationID
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	return id
}

// TestBuiltinToolsInWorktree drives the built-in provider over gRPC on both stores for an
// agent bound to a worktree (§16, §18.5): files are written and read inside it, a path
// outside is PERMISSION_DENIED, process.run is refused at MINIMAL privilege, streams the
// process's output at DEFAULT, and a busy loop past budget_cpu_ms ends CPU_BUDGET_EXCEEDED.
func TestBuiltinToolsInWorktree(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := worktreeSystem(t, kind)
			coder := dialBinder(t, sys, "coder")
			_, err := coder.wt.Bind(context.Background(), "app", "tools-1")
			require.NoError(t, err)
			// Authentication is off here: the call names the agent it is made for.
			ctx := metadata.AppendToOutgoingContext(context.Background(), wire.AgentIDKey, coder.ID())
			tc := toolpb.NewToolServiceClient(coder.Conn())
			b := tools.BuiltinProviderID

			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "fs.write", Args: []byte(`{"path":"notes/a.txt","content":"hello","create_dirs":true}`)})
			require.NoError(t, err)
			f, err := tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "fs.read", Args: []byte(`{"path":"notes/a.txt"}`)})
			require.NoError(t, err)
			var read struct {
				Content string `json:"content"`
			}
			require.NoError(t, json.Unmarshal(f.GetData(), &read))
			assert.Equal(t, "hello", read.Content)
			for _, p := range []string{"../../README.md", "/etc/hostname", "notes/../../../etc/passwd"} {
				var trailer metadata.MD
				_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "fs.read", Args: fmt.Appendf(nil, `{"path":%q}`, p)}, grpc.Trailer(&trailer))
				require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", p, err)
				assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ToolErrorCodeTrailer), p)
			}

			run := `{"argv":["sh","-c","cat notes/a.txt; echo; echo oops >&2"]}`
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(run)})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "MINIMAL spawns no process (§18.5.3): %v", err)
			st, err := tc.CallStream(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(run),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}})
			require.NoError(t, err)
			frames := drain(t, st)
			var stdout string
			for _, fr := range frames[:len(frames)-1] {
				if fr.GetContentType() == "text/plain; stream=stdout" {
					stdout += string(fr.GetData())
				}
			}
			assert.Equal(t, "hello\n", stdout, "the process ran in the worktree")
			assert.Equal(t, "ok", summaryOf(t, frames[len(frames)-1]).Status)

			// network_policy (§18.5.2): DENY_ALL, the default, leaves the process only the
			// loopback interface; EGRESS_RESTRICTED is refused, since no allowlist is configured.
			f, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["cat","/proc/net/dev"]}`),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}})
			require.NoError(t, err)
			netDev := stdoutFrames(t, tc, ctx, f.GetCallId())
			assert.Contains(t, netDev, "lo:")
			assert.Equal(t, 3, strings.Count(netDev, "\n"), "two header lines and lo only:\n%s", netDev)
			var trailer metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["true"]}`),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT", NetworkPolicy: "EGRESS_RESTRICTED"}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ToolErrorCodeTrailer))

			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["sh","-c","while :; do :; done"]}`),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT", BudgetCpuMs: 200, Timeout: durationpb.New(30 * time.Second)}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			assert.Equal(t, []string{"CPU_BUDGET_EXCEEDED"}, trailer.Get(wire.ToolErrorCodeTrailer))
		})
	}
}

// stdoutFrames reads back a finished call's stdout frames.
func stdoutFrames(t *testing.T, tc toolpb.ToolServiceClient, ctx context.Context, callID string) string {
	t.Helper()
	st, err := tc.CallStream(metadata.AppendToOutgoingContext(ctx, wire.ResumeAfterKey, "0"), &toolpb.ToolCall{CallId: callID})
	require.NoError(t, err)
	var b strings.Builder
	for _, f := range drain(t, st) {
		if f.GetContentType() == "text/plain; stream=stdout" {
			b.Write(f.GetData())
		}
	}
	return b.String()
}

// TestToolMaxConcurrency: a tool whose descriptor sets max_concurrency 1 (§18.1) runs one
// call at a time across the deployment, on both stores: four concurrent calls all complete,
// never two at once.
func TestToolMaxConcurrency(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, fp := toolSystem(t, kind)
			tc := toolpb.NewToolServiceClient(dialSigned(t, sys, "caller").Conn())
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() {
					_, err := tc.Call(context.Background(), &toolpb.ToolCall{ProviderId: "fake", ToolName: "serial", Args: []byte(`{}`)})
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(1), fp.maxRunning.Load(), "never two calls of the tool at once")
		})
	}
}

// TestToolCallDuringTemporalOutage: on both stores, a call made while the frontend cannot
// reach Temporal is recorded with the outbox entry that starts its workflow (one write); the
// caller's stream waits, and once Temporal is back the relay starts the call, which runs and
// ends the stream with its final frame — the call accepted during the outage is not lost.
func TestToolCallDuringTemporalOutage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			proxy := newTemporalProxy(t)
			cfg := newConfig(t, kind)
			cfg.ToolExecutors = map[string]tools.Executor{"fake": &fakeProvider{}}
			srv, _ := startBehindProxy(t, cfg, proxy)
			tc := toolpb.NewToolServiceClient(dialRaw(t, &system{app: srv}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			proxy.cut(restarting)
			callID := uniq(t, "outage")
			st, err := tc.CallStream(ctx, &toolpb.ToolCall{CallId: callID, ProviderId: "fake", ToolName: "ticks", Args: []byte(`{"count":2}`)})
			require.NoError(t, err)
			if _, err := st.Header(); err != nil {
				t.Fatalf("the call was not accepted during the outage: %v", err)
			}
			rec, err := srv.Store().ToolCalls().GetCall(ctx, callID)
			require.NoError(t, err, "the call is recorded while Temporal is away")
			assert.False(t, rec.Final)
			require.Eventually(t, func() bool {
				hs, err := srv.Store().Outbox().Pending(ctx, 100)
				if err != nil {
					return false
				}
				for _, h := range hs {
					if h.Kind == workflows.OutboxToolStart && h.WorkflowID == workflows.ToolWorkflowID(callID) {
						return true
					}
				}
				return false
			}, 10*time.Second, 50*time.Millisecond, "its start waits in the outbox")

			proxy.restore()
			frames := drain(t, st)
			require.Len(t, frames, 3)
			assert.Equal(t, "ok", summaryOf(t, frames[2]).Status, "the call ran once Temporal was back")
		})
	}
}
