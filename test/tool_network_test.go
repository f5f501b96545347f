package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
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

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/builtin"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// testPostgresAddr is where the test's PostgreSQL listens: the target a tool process must
// never reach. The proxy refuses it before connecting, so nothing is sent to it.
const testPostgresAddr = "127.0.0.1:5432"

// TestToolNetworkOverGRPC drives process.run's network policies over ToolService on both
// stores (§18.5.2, §18.5.3): under EGRESS_RESTRICTED the allowlisted loopback service is
// reached through the provider's proxy and PostgreSQL's port is PERMISSION_DENIED; under
// EGRESS_UNRESTRICTED PostgreSQL is PERMISSION_DENIED too; FULL_ACCESS and ELEVATED wait in
// a HITL invocation (TOOL_PRIVILEGE_ESCALATION) that the response header names, and run or
// are refused as the operator decides.
func TestToolNetworkOverGRPC(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
			var reached atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					reached.Add(1)
					c.Close()
				}
			}()
			cfg := hitlConfig(t, kind)
			cfg.Repos = "app=" + gitRepo(t)
			cfg.ToolEgressAllow = ln.Addr().String()
			sys := start(t, cfg)
			coder := dialBinder(t, sys, "netcoder")
			_, err = coder.wt.Bind(context.Background(), "app", "net-1")
			require.NoError(t, err)
			ctx := metadata.AppendToOutgoingContext(context.Background(), wire.AgentIDKey, coder.ID())
			tc := toolpb.NewToolServiceClient(coder.Conn())

			// bash opens the connection itself: no client tool is needed on the host.
			script := func(s string) []byte {
				b, err := json.Marshal(map[string]any{"argv": []string{"bash", "-c", s}})
				require.NoError(t, err)
				return b
			}
			viaProxy := func(target string) []byte {
				return script(fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/3128 || exit 3
printf 'CONNECT %s HTTP/1.1\r\n\r\n' >&3
read -r line <&3; echo "$line"
case "$line" in *" 200 "*) ;; *) exit 4;; esac`, target))
			}
			host, port, _ := net.SplitHostPort(ln.Addr().String())
			direct := script(fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s`, host, port))
			policy := func(network, privilege string) *toolpb.ExecutionPolicy {
				return &toolpb.ExecutionPolicy{NetworkPolicy: network, PrivilegeLevel: privilege, Timeout: durationpb.New(30 * time.Second)}
			}
			call := func(args []byte, pol *toolpb.ExecutionPolicy) (*toolpb.ToolFrame, metadata.MD, error) {
				var trailer metadata.MD
				f, err := tc.Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: builtin.ToolProcessRun, Args: args, Policy: pol}, grpc.Trailer(&trailer))
				return f, trailer, err
			}

			// EGRESS_RESTRICTED: the allowlisted service, through the proxy.
			f, _, err := call(viaProxy(ln.Addr().String()), policy("EGRESS_RESTRICTED", "DEFAULT"))
			require.NoError(t, err)
			assert.Contains(t, stdoutFrames(t, tc, ctx, f.GetCallId()), "200 Connection established")
			assert.EqualValues(t, 1, reached.Load(), "the allowlisted service was reached once")

			// PostgreSQL's port: not in the allowlist, and a loopback address.
			for _, tt := range []struct{ network, want string }{
				{"EGRESS_RESTRICTED", "not in the egress allowlist"},
				{"EGRESS_UNRESTRICTED", "a loopback address of the host"},
			} {
				_, trailer, err := call(viaProxy(testPostgresAddr), policy(tt.network, "DEFAULT"))
				require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", tt.network, err)
				assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ToolErrorCodeTrailer))
				assert.Contains(t, status.Convert(err).Message(), tt.want)
			}
			// Around the proxy there is no route.
			_, trailer, err := call(direct, policy("EGRESS_UNRESTRICTED", "DEFAULT"))
			require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
			assert.Equal(t, []string{"TOOL_FAILED"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.EqualValues(t, 1, reached.Load(), "nothing reached the service around the proxy")

			// FULL_ACCESS and ELEVATED wait for an operator; the header names the invocation.
			waitFor := func(args []byte, pol *toolpb.ExecutionPolicy, decision string) *toolpb.ToolFrame {
				st, err := tc.CallStream(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: builtin.ToolProcessRun, Args: args, Policy: pol})
				require.NoError(t, err)
				hdr, err := st.Header()
				require.NoError(t, err)
				callID := hdr.Get(wire.CallIDHeader)
				require.Len(t, callID, 1)
				require.Equal(t, []string{workflows.ToolApprovalID(callID[0])}, hdr.Get(wire.HITLInvocationIDHeader))
				hitlID := pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, callID[0])
				require.Equal(t, workflows.ToolApprovalID(callID[0]), hitlID)
				out, err := runCLI(t, sys, "alice-token", "decide", hitlID, decision, "--rationale", "network test")
				require.NoError(t, err, out)
				frames := drain(t, st)
				return frames[len(frames)-1]
			}
			fin := waitFor(direct, policy("FULL_ACCESS", "DEFAULT"), "deny")
			assert.Equal(t, "PERMISSION_DENIED", summaryOf(t, fin).ErrorCode)
			assert.EqualValues(t, 1, reached.Load(), "a denied FULL_ACCESS call did not run")
			fin = waitFor(direct, policy("FULL_ACCESS", "DEFAULT"), "approve")
			assert.Equal(t, "ok", summaryOf(t, fin).Status)
			assert.EqualValues(t, 2, reached.Load(), "an approved FULL_ACCESS call has the host's network")
			fin = waitFor(script("true"), policy("DENY_ALL", "ELEVATED"), "approve")
			assert.Equal(t, "ok", summaryOf(t, fin).Status)
		})
	}
}
