//go:build linux

package mcp

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// dialServerEnv makes the test binary an MCP stdio server with one tool, "dial", which
// connects to its address and answers whether it could.
const dialServerEnv = "SW4RM_TEST_MCP_DIAL_SERVER"

func init() {
	// Runs before TestMain: as the server, the test binary serves and exits.
	if os.Getenv(dialServerEnv) != "1" {
		return
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "dial", Version: "1"}, nil)
	type in struct {
		Addr string `json:"addr"`
	}
	type out struct {
		Reached bool   `json:"reached"`
		Err     string `json:"err,omitempty"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "dial"}, func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, out, error) {
		c, err := net.DialTimeout("tcp", a.Addr, 3*time.Second)
		if err != nil {
			return nil, out{Err: err.Error()}, nil
		}
		c.Close()
		return nil, out{Reached: true}, nil
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// TestServerNetworkIsolation: a stdio server declared network=DENY_ALL runs without a
// network — it cannot reach a service on the host's loopback (the escape) — while the same
// server undeclared reaches it (the twin).
func TestServerNetworkIsolation(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dial := func(isolated bool) (reached bool, why string) {
		t.Helper()
		ctx := context.Background()
		c, err := Connect(ctx, Server{Command: []string{exe, "-test.run=^$"}, Env: append(os.Environ(), dialServerEnv+"=1"), IsolateNetwork: isolated})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		r, err := c.CallTool(ctx, "dial", json.RawMessage(`{"addr":"`+ln.Addr().String()+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			Reached bool   `json:"reached"`
			Err     string `json:"err"`
		}
		if err := json.Unmarshal(r.Data(), &o); err != nil {
			t.Fatalf("%s: %v", r.Data(), err)
		}
		return o.Reached, o.Err
	}
	if reached, why := dial(true); reached || accepted.Load() != 0 {
		t.Fatalf("a server declared DENY_ALL reached the host's loopback (%s)", why)
	}
	if reached, why := dial(false); !reached || accepted.Load() != 1 {
		t.Fatalf("the undeclared server could not reach the host's loopback: %s", why)
	}

	for spec, want := range map[string]bool{
		"fs[network=DENY_ALL]=stdio:/bin/srv {worktree}": true,
		"fs[network=EGRESS_UNRESTRICTED]=stdio:/bin/srv": false,
		"fs=stdio:/bin/srv": false,
	} {
		ps, err := ParseProviders(spec)
		if err != nil || len(ps) != 1 {
			t.Fatalf("%s: %v", spec, err)
		}
		if ps[0].Server.IsolateNetwork != want || (want && ps[0].Network != tool.NetworkDenyAll) {
			t.Errorf("%s: IsolateNetwork = %v, want %v", spec, ps[0].Server.IsolateNetwork, want)
		}
	}
}
