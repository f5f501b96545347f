// Command dag runs a DAG workflow (RFC §17.7) against a running SW4RM server: a
// build → {unit-tests, lint} → package → deploy pipeline served by four agents (builder,
// checker, packager, deployer). Lint fails on its first run, so the run waits with package
// and deploy not run; the finding is fixed, the run is resumed from lint and completes, and
// every node that had completed ran exactly once. The logic is in ./pipeline.
//
// Start a server with `make dev`, then run `make example-dag` (or
// `go run ./examples/dag -server host:port`). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/dag/pipeline"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for the run to fail on lint, and then to complete")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := pipeline.Run(ctx, *server, pipeline.Options{Wait: *wait})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nerror:", err)
		os.Exit(1)
	}
}

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
