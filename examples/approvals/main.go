// Command approvals runs the approvals example (§15, docs/hitl.md) against a running SW4RM
// server: the agent janitor wants to purge a tenant's old customer records, asks a human
// through HitlService.Decide, prints the `sw4rm hitl decide` command that answers it, and
// waits. Approved, it calls the records agent's tool records.purge; denied, or not decided
// before -wait passes (the invocation's fallback then denies it), it falls back and purges
// nothing. It ends by itself and deregisters both agents. The logic is in ./retention.
//
// Start a server with `make dev`, then run `make example-approvals` (or
// `go run ./examples/approvals -server host:port -wait 10s`). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/approvals/retention"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", retention.DefaultServer), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	wait := flag.Duration("wait", time.Minute, "how long a human has to decide before the fallback does")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := retention.Run(ctx, *server, retention.Options{Wait: *wait})
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
