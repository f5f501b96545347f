package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// temporalServer is a Temporal dev server the suite runs on its own port and database file,
// so that it can be killed and started again on the same state.
type temporalServer struct {
	t      testing.TB
	addr   string
	args   []string
	log    string
	proc   *proc
	client client.Client
}

// startTemporal starts a dev server on a free port with its database in the test's temp dir.
func startTemporal(t testing.TB, dir string) *temporalServer {
	t.Helper()
	ports := freePorts(t, 3)
	ts := &temporalServer{
		t:    t,
		addr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		log:  filepath.Join(dir, "temporal.log"),
	}
	ts.args = append([]string{"server", "start-dev",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(ports[0]), "--headless",
		"--http-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]),
		"--db-filename", filepath.Join(dir, "temporal.db"), "--log-level", "error",
	}, devServerArgs()...)
	ts.start()
	t.Cleanup(func() {
		if ts.client != nil {
			ts.client.Close()
		}
	})
	return ts
}

// devServerArgs are the flags `make dev` and the end-to-end harness give the dev server:
// the transfer queue's poll bound (without it a signal waits up to 50 ms for its workflow)
// and sw4rm's search attributes.
func devServerArgs() []string {
	return append([]string{"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"}, workflows.SearchAttributeFlags()...)
}

// start runs the dev server and waits until its default namespace answers.
func (ts *temporalServer) start() {
	t := ts.t
	t.Helper()
	ts.proc = startProc(t, "temporal", ts.log, cleanEnv(), tools.temporal, ts.args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := waitCtx(ctx, 200*time.Millisecond, func() bool {
		if ts.proc.exited() {
			return true
		}
		if ts.client == nil {
			c, err := client.DialContext(ctx, client.Options{HostPort: ts.addr, Namespace: "default", Logger: tlog.NewStructuredLogger(quietLog())})
			if err != nil {
				return false
			}
			ts.client = c
		}
		_, err := ts.client.WorkflowService().DescribeNamespace(ctx, describeDefault())
		return err == nil
	})
	if ts.proc.exited() {
		t.Fatalf("Temporal dev server exited at start:\n%s", tail(ts.log, 30))
	}
	if err != nil {
		t.Fatalf("Temporal dev server at %s did not serve within 90s:\n%s", ts.addr, tail(ts.log, 30))
	}
}

// kill is kill -9 of the dev server.
func (ts *temporalServer) kill() {
	ts.proc.kill()
	// The frontend port must be closed before the outage counts as begun.
	if err := waitFor(10*time.Second, 50*time.Millisecond, func() bool { return !listening(ts.addr) }); err != nil {
		ts.t.Fatalf("Temporal still listens on %s after SIGKILL", ts.addr)
	}
}

// restart starts the dev server again on the same port and database file.
func (ts *temporalServer) restart() { ts.start() }

func (ts *temporalServer) String() string { return fmt.Sprintf("temporal(%s)", ts.addr) }
