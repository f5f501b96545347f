package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// sw4rmProc is one `sw4rm server|worker|dev` process, started again with the same
// configuration (and so the same port) after a kill.
type sw4rmProc struct {
	t    testing.TB
	role string // server, worker or dev
	name string
	addr string // gRPC address; empty for a worker
	env  []string
	log  string
	proc *proc
	runs int
}

// sw4rmConfig is the environment every process of a scenario shares: one Temporal, one
// store, one task queue; extra holds the scenario's SW4RM_* settings.
type sw4rmConfig struct {
	temporal string
	database string
	extra    []string
}

// startSW4RM starts `sw4rm <role>` as the operator would, configured through SW4RM_*
// variables, and waits until it serves: a frontend answers gRPC health checks, a worker has
// logged that it polls.
func startSW4RM(t testing.TB, dir, role, name string, cfg sw4rmConfig) *sw4rmProc {
	t.Helper()
	p := &sw4rmProc{t: t, role: role, name: name, log: filepath.Join(dir, name+".log")}
	env := []string{
		"SW4RM_TEMPORAL_ADDRESS=" + cfg.temporal,
		"SW4RM_DATABASE_URL=" + cfg.database,
		"SW4RM_TASK_QUEUE=sw4rm-faults",
		"SW4RM_HTTP_ADDR=", // no /metrics listener: nothing here reads it
		"SW4RM_LOG_LEVEL=info",
	}
	if role != "worker" {
		p.addr = "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
		env = append(env, "SW4RM_GRPC_ADDR="+p.addr)
	}
	p.env = cleanEnv(append(env, cfg.extra...)...)
	p.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log, last warnings and errors:\n%s", p.name, notable(p.log, 15))
		}
	})
	return p
}

// start runs the process and waits until it is ready (60 s at most).
func (p *sw4rmProc) start() {
	t := p.t
	t.Helper()
	p.runs++
	marker := "---- " + p.name + " start"
	p.proc = startProc(t, p.name, p.log, p.env, tools.sw4rm, p.role)
	ready := func() bool {
		if p.proc.exited() {
			return true
		}
		if p.role == "worker" {
			return logContains(p.log, marker, "worker polling")
		}
		return serving(p.addr)
	}
	if err := waitFor(60*time.Second, 50*time.Millisecond, ready); err != nil || p.proc.exited() {
		t.Fatalf("%s (run %d) did not become ready:\n%s", p.name, p.runs, tail(p.log, 30))
	}
}

// kill is kill -9 of the process.
func (p *sw4rmProc) kill() { p.proc.kill() }

// pause stalls the process (SIGSTOP); resume lets it go on (SIGCONT).
func (p *sw4rmProc) pause()  { p.proc.pause() }
func (p *sw4rmProc) resume() { p.proc.resume() }

// restart starts the process again with the same configuration and port.
func (p *sw4rmProc) restart() { p.start() }

// serving reports whether the gRPC health service at addr answers SERVING.
func serving(addr string) bool {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

func describeDefault() *workflowservice.DescribeNamespaceRequest {
	return &workflowservice.DescribeNamespaceRequest{Namespace: "default"}
}

// quietLog keeps client logs out of the test output unless SW4RM_TEST_LOG=1.
func quietLog() *slog.Logger {
	if os.Getenv("SW4RM_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// deployment is the split topology most faults are tried on: one `sw4rm server` and a few
// `sw4rm worker`s sharing a PostgreSQL cluster and a Temporal dev server of their own.
type deployment struct {
	ts      *temporalServer
	cfg     sw4rmConfig
	server  *sw4rmProc
	workers []*sw4rmProc
}

// startDeployment starts a deployment with n workers (worker-1 … worker-n) and the extra
// settings given.
func startDeployment(t testing.TB, dir string, n int, extra ...string) deployment {
	t.Helper()
	pg := newCluster(t)
	d := deployment{ts: startTemporal(t, dir)}
	d.cfg = sw4rmConfig{temporal: d.ts.addr, database: pg.URL(), extra: extra}
	d.server = startSW4RM(t, dir, "server", "server", d.cfg)
	for i := 1; i <= n; i++ {
		d.workers = append(d.workers, startSW4RM(t, dir, "worker", fmt.Sprintf("worker-%d", i), d.cfg))
	}
	return d
}
