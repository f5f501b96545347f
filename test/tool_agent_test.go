package test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestAgentProvidedTools covers tools an agent provides itself (§18.1, §18.2) on both stores
// in required authentication mode: the agent registers them over ConnectorService; a call is
// routed to it as a TOOL_CALL envelope and its frames and TOOL_RESULT reach the caller's
// stream; a call it does not answer in time ends TOOL_TIMEOUT and the agent is told; another
// agent's answer to the call is refused with permission_denied; a cancel ends the call
// CANCELLED and tells the provider; its TOOL_ERROR becomes the call's error.
func TestAgentProvidedTools(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			provider := dialSigned(t, sys, "provider")
			caller := dialSigned(t, sys, "caller")
			intruder := dialSigned(t, sys, "intruder")

			resp, err := connectorpb.NewConnectorServiceClient(provider.Conn()).RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
				ProviderId: provider.ID(), Tools: []*connectorpb.ToolDescriptor{
					{ToolName: "summarize", InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`, Idempotent: true, SideEffects: "none"},
					{ToolName: "slow", InputSchema: `{"type":"object"}`, SideEffects: "none"},
					{ToolName: "broken", InputSchema: `{"type":"object"}`, SideEffects: "none"},
				}})
			require.NoError(t, err)
			require.True(t, resp.GetOk(), resp.GetReason())

			// The provider agent serves its tools from its message stream.
			var mu sync.Mutex
			offers := map[string]tsdk.Offer{}
			var cancelled []string
			sctx, stop := context.WithCancel(ctx)
			t.Cleanup(stop)
			in, err := provider.Receive(sctx)
			require.NoError(t, err)
			p := tsdk.NewProvider(provider.Agent)
			go func() {
				for {
					d, err := in.Next()
					if err != nil {
						return
					}
					_, _ = d.Confirm(sctx)
					if id, ok := tsdk.CancelledCall(d.Envelope); ok {
						mu.Lock()
						cancelled = append(cancelled, id)
						mu.Unlock()
						continue
					}
					o, ok, err := tsdk.ParseOffer(d.Envelope)
					if !ok || err != nil {
						continue
					}
					mu.Lock()
					offers[o.CallID] = o
					mu.Unlock()
					switch o.ToolName {
					case "summarize":
						_ = p.Frame(sctx, o.CallID, "text/plain", []byte("reading"))
						_ = p.Result(sctx, o.CallID, "application/json", []byte(`{"summary":"short"}`))
					case "broken":
						_ = p.Fail(sctx, o.CallID, "TOOL_FAILED", "the model is down")
					}
				}
			}()
			tc := toolpb.NewToolServiceClient(caller.Conn())

			st, err := tc.CallStream(ctx, &toolpb.ToolCall{ProviderId: provider.ID(), ToolName: "summarize", Args: []byte(`{"text":"a long text"}`)})
			require.NoError(t, err)
			frames := drain(t, st)
			require.Len(t, frames, 2)
			assert.Equal(t, "reading", string(frames[0].GetData()))
			assert.JSONEq(t, `{"summary":"short"}`, string(frames[1].GetData()))
			assert.Equal(t, "ok", summaryOf(t, frames[1]).Status)
			recordHistory(t, sys.app.Temporal(), workflows.ToolWorkflowID(frames[0].GetCallId()), "tool_agent_provided_"+kind)
			mu.Lock()
			o := offers[frames[0].GetCallId()]
			mu.Unlock()
			assert.Equal(t, "agent:"+caller.ID(), o.Caller, "the provider learns the proven caller")
			assert.JSONEq(t, `{"text":"a long text"}`, string(o.Args))
			assert.Equal(t, "DENY_ALL", o.Policy.NetworkPolicy)

			var trailer metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: provider.ID(), ToolName: "broken", Args: []byte(`{}`)}, grpc.Trailer(&trailer))
			require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
			assert.Equal(t, []string{"TOOL_FAILED"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), "the model is down")

			timedOut := uniq(t, "timeout")
			_, err = tc.Call(ctx, &toolpb.ToolCall{CallId: timedOut, ProviderId: provider.ID(), ToolName: "slow", Args: []byte(`{}`),
				Policy: &toolpb.ExecutionPolicy{Timeout: durationpb.New(500 * time.Millisecond)}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			assert.Equal(t, []string{"TOOL_TIMEOUT"}, trailer.Get(wire.ToolErrorCodeTrailer))

			// Only the provider answers its calls; the caller cancels a call in flight.
			inFlight := uniq(t, "inflight")
			st, err = tc.CallStream(ctx, &toolpb.ToolCall{CallId: inFlight, ProviderId: provider.ID(), ToolName: "slow", Args: []byte(`{}`)})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				_, ok := offers[inFlight]
				return ok
			}, 20*time.Second, 20*time.Millisecond, "the call reaches the provider")
			err = tsdk.NewProvider(intruder.Agent).Result(ctx, inFlight, "application/json", []byte(`{"forged":true}`))
			require.Error(t, err)
			var rej *sdk.RejectedError
			assert.True(t, errors.As(err, &rej), "a protocol refusal: %v", err)
			assert.Contains(t, err.Error(), "permission_denied", "%v", err)
			ans, err := tsdk.NewFor(caller.Conn(), "").Cancel(ctx, inFlight)
			require.NoError(t, err)
			assert.Equal(t, "CANCELLED", ans)
			frames = drain(t, st)
			assert.Equal(t, "cancelled", summaryOf(t, frames[len(frames)-1]).Status)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return assert.ObjectsAreEqual([]string{timedOut, inFlight}, cancelled)
			}, 20*time.Second, 20*time.Millisecond, "the provider is told of both calls that ended without its answer")
			err = p.Result(ctx, inFlight, "application/json", []byte(`{}`))
			require.Error(t, err, "an answer after the end is refused")
			assert.Contains(t, err.Error(), "already ended")
		})
	}
}
