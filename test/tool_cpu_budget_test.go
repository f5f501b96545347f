package test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// burnMCPArg, as the first argument of this test binary, makes it an MCP stdio server with
// one tool, "burn", a busy loop until the call is cancelled (runBurnMCPIfAsked).
const burnMCPArg = "__sw4rm-test-burn-mcp"

// runBurnMCPIfAsked serves the burn MCP server over stdio when the binary was started as one.
func runBurnMCPIfAsked() {
	if len(os.Args) < 2 || os.Args[1] != burnMCPArg {
		return
	}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "burn", Version: "1"}, nil)
	s.AddTool(&mcpsdk.Tool{Name: "burn", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			for n := 0; ctx.Err() == nil; n++ {
				if n%1_000_000 == 0 {
					runtime.Gosched()
				}
			}
			return nil, ctx.Err()
		})
	s.AddTool(&mcpsdk.Tool{Name: "rest", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "rested"}}}, nil
		})
	if err := s.Run(context.Background(), &mcpsdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// TestToolCPUBudgetEverywhere: budget_cpu_ms (§18.5.1) over gRPC on both stores, on every
// kind of provider — never silently ignored:
//   - built-in process.run: a busy loop that double-forks with setsid, leaving the process
//     group and the session, is stopped with CPU_BUDGET_EXCEEDED;
//   - a stdio MCP server: a call whose server burns past the budget ends
//     CPU_BUDGET_EXCEEDED, and the next call runs on a new server;
//   - an HTTP MCP server: the call is refused PERMISSION_DENIED, saying why;
//   - a tool an agent provides: the budget reaches the agent in the TOOL_CALL, the caller is
//     told in sw4rm-tool-policy-note that the agent enforces it, and the agent's
//     CPU_BUDGET_EXCEEDED is the call's code.
func TestToolCPUBudgetEverywhere(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	remote := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server {
		s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "remote", Version: "1"}, nil)
		s.AddTool(&mcpsdk.Tool{Name: "remote_echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
				return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "echo"}}}, nil
			})
		return s
	}, nil))
	t.Cleanup(remote.Close)

	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.Repos = "app=" + gitRepo(t)
			cfg.MCPServers = "burn[network=DENY_ALL]=stdio:" + exe + " " + burnMCPArg + ";remote[network=DENY_ALL]=" + remote.URL
			sys := start(t, cfg)
			coder := dialBinder(t, sys, "coder")
			_, err := coder.wt.Bind(context.Background(), "app", "cpu-1")
			require.NoError(t, err)
			ctx := metadata.AppendToOutgoingContext(context.Background(), wire.AgentIDKey, coder.ID())
			tc := toolpb.NewToolServiceClient(coder.Conn())
			cc := connectorpb.NewConnectorServiceClient(coder.Conn())
			for _, p := range []string{"burn", "remote"} {
				require.Eventually(t, func() bool {
					r, err := cc.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: p})
					return err == nil && len(r.GetTools()) > 0
				}, 60*time.Second, 100*time.Millisecond, "MCP provider %s imported", p)
			}
			budget := func(ms uint64) *toolpb.ExecutionPolicy {
				return &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT", BudgetCpuMs: ms, Timeout: durationpb.New(30 * time.Second)}
			}
			refusedWith := func(err error, trailer metadata.MD, code codes.Code, toolCode string) {
				t.Helper()
				require.Equal(t, code, status.Code(err), "%v", err)
				assert.Equal(t, []string{toolCode}, trailer.Get(wire.ToolErrorCodeTrailer))
			}

			// Built-in process.run: the orphaned busy loop is counted and stopped.
			var trailer metadata.MD
			began := time.Now()
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "process.run",
				Args:   []byte(`{"argv":["sh","-c","setsid sh -c 'sh -c \"while :; do :; done\" & exit 0'; sleep 60"]}`),
				Policy: budget(200)}, grpc.Trailer(&trailer))
			refusedWith(err, trailer, codes.ResourceExhausted, "CPU_BUDGET_EXCEEDED")
			assert.Less(t, time.Since(began), 25*time.Second, "stopped at the budget, not the timeout")

			// A stdio MCP server past the budget; the next call gets a new server.
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "burn", ToolName: "burn", Args: []byte(`{}`), Policy: budget(200)}, grpc.Trailer(&trailer))
			refusedWith(err, trailer, codes.ResourceExhausted, "CPU_BUDGET_EXCEEDED")
			assert.Contains(t, status.Convert(err).Message(), "the server was stopped")
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "burn", ToolName: "rest", Args: []byte(`{}`), Policy: budget(5000)})
			require.NoError(t, err, "a budgeted call under its budget runs, on a new server")

			// An HTTP MCP server: refused, not ignored.
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "remote", ToolName: "remote_echo", Args: []byte(`{}`), Policy: budget(1000)}, grpc.Trailer(&trailer))
			refusedWith(err, trailer, codes.PermissionDenied, "PERMISSION_DENIED")
			assert.Contains(t, status.Convert(err).Message(), "reached over HTTP")
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: "remote", ToolName: "remote_echo", Args: []byte(`{}`)})
			require.NoError(t, err, "without a budget the HTTP server is called")

			// A tool an agent provides: the agent enforces the budget it receives.
			provider := dialBinder(t, sys, "provider")
			resp, err := connectorpb.NewConnectorServiceClient(provider.Conn()).RegisterProvider(context.Background(), &connectorpb.ProviderRegisterRequest{
				ProviderId: provider.ID(), Tools: []*connectorpb.ToolDescriptor{{ToolName: "crunch", InputSchema: `{"type":"object"}`, SideEffects: "none"}}})
			require.NoError(t, err)
			require.True(t, resp.GetOk(), resp.GetReason())
			sctx, stop := context.WithCancel(context.Background())
			t.Cleanup(stop)
			in, err := provider.Receive(sctx)
			require.NoError(t, err)
			var mu sync.Mutex
			var offered []int64
			p := tsdk.NewProvider(provider.Agent)
			go func() {
				for {
					d, err := in.Next()
					if err != nil {
						return
					}
					_, _ = d.Confirm(sctx)
					o, ok, err := tsdk.ParseOffer(d.Envelope)
					if !ok || err != nil {
						continue
					}
					mu.Lock()
					offered = append(offered, o.Policy.BudgetCPUMs)
					mu.Unlock()
					_ = p.Fail(sctx, o.CallID, "CPU_BUDGET_EXCEEDED", "crunching used more than the budget")
				}
			}()
			var header metadata.MD
			_, err = tc.Call(ctx, &toolpb.ToolCall{ProviderId: provider.ID(), ToolName: "crunch", Args: []byte(`{}`), Policy: budget(750)},
				grpc.Header(&header), grpc.Trailer(&trailer))
			refusedWith(err, trailer, codes.ResourceExhausted, "CPU_BUDGET_EXCEEDED")
			notes := header.Get(wire.ToolPolicyNoteHeader)
			require.Len(t, notes, 1, "the caller is told who enforces the budget")
			note, err := strconv.Unquote(notes[0])
			require.NoError(t, err)
			assert.Contains(t, note, `budget_cpu_ms 750 is enforced by provider agent "`+provider.ID()+`", which receives it in the TOOL_CALL's execution_policy`)
			mu.Lock()
			assert.Equal(t, []int64{750}, offered, "the budget reaches the agent")
			mu.Unlock()
		})
	}
}
