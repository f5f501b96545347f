// Package test holds SW4RM's end-to-end tests: they start the real Temporal dev server (the
// official CLI, installed by `make temporal`), run sw4rm's server and worker against it with
// the memory or the PostgreSQL store, and drive the gRPC API exactly as agent processes do.
package test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/tools/builtin"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// temporalAddr is the dev server's frontend, shared by every test in the package.
var temporalAddr string

// temporalCLI finds the Temporal CLI: $SW4RM_TEMPORAL_CLI, the Makefile's install location,
// then PATH.
func temporalCLI() string {
	if p := os.Getenv("SW4RM_TEMPORAL_CLI"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "sw4rm", "bin", "temporal")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	return ""
}

func TestMain(m *testing.M) {
	// The built-in provider's processes run under this test binary as their init.
	builtin.RunInitIfAsked()
	runBurnMCPIfAsked() // an MCP server of tool_cpu_budget_test.go
	cli := temporalCLI()
	if cli == "" {
		msg := "end-to-end tests need the Temporal CLI: run `make temporal` or set SW4RM_TEMPORAL_CLI"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: cli,
		LogLevel:     "error",
		// The same tuning as `make dev` (see the Makefile's TEMPORAL_DEV_FLAGS): without it
		// the dev server's transfer queue polls 20 times a second, and every signal waits up
		// to 50 ms before its workflow sees it.
		ExtraArgs:     devServerArgs(),
		ClientOptions: &client.Options{Namespace: "default", Logger: quietLogger()},
		// The dev server logs at error level when a test's sw4rm stops mid-request; on the
		// terminal those lines would split `go test -bench` result lines, which benchreport
		// parses. SW4RM_TEST_LOG=1 shows them.
		Stdout: io.Discard,
		Stderr: devServerLog(),
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: start Temporal dev server:", err)
		os.Exit(1)
	}
	temporalAddr = srv.FrontendHostPort()
	code := m.Run()
	_ = srv.Stop()
	os.Exit(code)
}

// devServerArgs are the dev server's extra flags, as `make dev` passes them: the transfer
// queue's poll bound, and sw4rm's search attributes registered up front, so that the many
// systems the tests start only list them (sw4rm adds missing ones itself otherwise).
func devServerArgs() []string {
	return append([]string{"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"}, workflows.SearchAttributeFlags()...)
}

// devServerLog is where the Temporal dev server's output goes: nowhere unless
// SW4RM_TEST_LOG=1.
func devServerLog() io.Writer {
	if os.Getenv("SW4RM_TEST_LOG") == "1" {
		return os.Stderr
	}
	return io.Discard
}

// quietLogger keeps the SDK's and sw4rm's logs out of test output unless SW4RM_TEST_LOG=1.
func quietLogger() *slogAdapter { return &slogAdapter{testLogger()} }

func testLogger() *slog.Logger {
	if os.Getenv("SW4RM_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// slogAdapter satisfies the SDK's logger interface with slog.
type slogAdapter struct{ l *slog.Logger }

func (s *slogAdapter) Debug(msg string, kv ...any) { s.l.Debug(msg, kv...) }
func (s *slogAdapter) Info(msg string, kv ...any)  { s.l.Info(msg, kv...) }
func (s *slogAdapter) Warn(msg string, kv ...any)  { s.l.Warn(msg, kv...) }
func (s *slogAdapter) Error(msg string, kv ...any) { s.l.Error(msg, kv...) }

// storeKinds are the stores every end-to-end scenario runs against.
var storeKinds = []string{"memory", "postgres"}

// system is one running sw4rm (server + worker) for a test.
type system struct {
	app *app.App
	cfg app.Config
}

// newConfig returns a configuration for a test: random ports, its own task queue, and a fresh
// PostgreSQL database when kind is "postgres".
func newConfig(t testing.TB, kind string) app.Config {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.TemporalAddress = temporalAddr
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.TaskQueue = "sw4rm-test-" + uuid.NewString()[:8]
	// Tests that are not about ACK timeouts must not race them on a loaded machine.
	cfg.AckTimeout = time.Minute
	if kind == "postgres" {
		cfg.DatabaseURL = pgtest.NewDatabase(t)
	}
	// SW4RM_GROUP_COMMIT_WINDOW=… and SW4RM_GROUP_COMMIT_FLUSHERS=… in the environment of
	// make bench compare group-commit settings.
	if w, err := time.ParseDuration(os.Getenv("SW4RM_GROUP_COMMIT_WINDOW")); err == nil {
		cfg.GroupCommitWindow = w
	}
	if n, err := strconv.Atoi(os.Getenv("SW4RM_GROUP_COMMIT_FLUSHERS")); err == nil && n > 0 {
		cfg.GroupCommitFlushers = n
	}
	return cfg
}

// start runs server and worker with cfg and stops them when the test ends.
func start(t testing.TB, cfg app.Config) *system {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Roles{Server: true, Worker: true}, testLogger())
	require.NoError(t, err)
	s := &system{app: a, cfg: cfg}
	t.Cleanup(a.Stop)
	return s
}

// uniq makes an agent id unique across tests sharing the dev server's namespace.
func uniq(t testing.TB, name string) string {
	base := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return strings.Trim(base, "-") + "-" + name + "-" + uuid.NewString()[:6]
}
