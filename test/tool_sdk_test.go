package test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// dropProxy forwards TCP connections to a target and can drop every open one, as a network
// blip or a load balancer restart would.
type dropProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &dropProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); p.drop() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

func (p *dropProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestToolSDK drives tool calls through the Go SDK (sdk/tool) on both stores: Tools lists
// the built-in provider, JSON decodes a result, a failed call is an *Error with its code, and
// a stream whose connection drops mid-call resumes after its last frame by itself, seeing
// every frame exactly once and the final frame last.
func TestToolSDK(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			proxy := newDropProxy(t, sys.app.GRPCAddr())
			conn, err := grpc.NewClient(proxy.ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			c := tsdk.NewFor(conn, uniq(t, "agent"))
			ctx := context.Background()

			ds, err := c.Tools(ctx, tools.BuiltinProviderID)
			require.NoError(t, err)
			names := make([]string, len(ds))
			for i, d := range ds {
				names[i] = d.GetToolName()
			}
			assert.Subset(t, names, []string{"echo", "fs.read", "fs.write", "fs.list", "process.run", "sleep"})

			var out map[string]any
			require.NoError(t, c.JSON(ctx, tsdk.Call{ProviderID: tools.BuiltinProviderID, ToolName: "echo", Args: map[string]any{"hi": "there"}}, &out))
			assert.Equal(t, "there", out["hi"])

			_, err = c.Do(ctx, tsdk.Call{ProviderID: tools.BuiltinProviderID, ToolName: "fs.read", Args: map[string]any{"path": "x"}})
			assert.Equal(t, "WORKTREE_NOT_BOUND", tsdk.CodeOf(err), "no worktree (§16): %v", err)

			st, err := c.Stream(ctx, tsdk.Call{ProviderID: tools.BuiltinProviderID, ToolName: "sleep", Args: map[string]any{"ms": 1500, "tick_ms": 100}})
			require.NoError(t, err)
			var frames []*toolpb.ToolFrame
			for {
				f, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				frames = append(frames, f)
				if len(frames) == 3 {
					proxy.drop()
				}
			}
			require.NotEmpty(t, frames)
			for i, f := range frames {
				require.Equal(t, uint64(i+1), f.GetFrameNo(), "every frame once, in order, across the drop")
			}
			last := frames[len(frames)-1]
			require.True(t, last.GetFinal())
			sum, err := tsdk.SummaryOf(last)
			require.NoError(t, err)
			assert.Equal(t, "ok", sum.Status)
		})
	}
}
