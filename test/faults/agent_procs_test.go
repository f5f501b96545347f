package faults

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// dialRegistered is the start of an agent that runs as a process of its own: it dials addr
// as id and registers d, retrying until the server answers or ctx ends (the suite may start
// it while a server restarts), and, with runnable, also reports RUNNABLE in the same try.
// The caller closes the agent.
func dialRegistered(ctx context.Context, addr, id string, d *registrypb.AgentDescriptor, runnable bool) (*sdk.Agent, error) {
	a, err := sdk.Dial(addr, id, connOpts()...)
	if err != nil {
		return nil, err
	}
	err = waitCtx(ctx, 200*time.Millisecond, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		err = a.Register(cctx, d)
		if err == nil && runnable {
			err = a.Heartbeat(cctx, commonpb.AgentState_RUNNABLE, map[string]string{"ok": "yes"})
		}
		return err == nil
	})
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	return a, nil
}

// startAgentProc starts the suite's own test binary as agent id's process, with env (its
// main_test.go hook picks the agent's role from it), logging to dir; a failed test shows the
// log's tail.
func startAgentProc(t *testing.T, dir, id string, env []string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := "agent-" + id
	p := startProc(t, name, filepath.Join(dir, name+".log"), env, self)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, tail(p.log, 20))
		}
	})
	return p
}
