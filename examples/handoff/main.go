// Command handoff runs a support swarm that delegates with the handoff protocol (RFC §17.6)
// against a running SW4RM server: a triage agent hands a billing ticket to whichever agent
// has the "billing" capability, without naming one. Three specialists have it: one is
// overloaded and answers OVERLOADED (the handoff is offered to it again after a backoff, then
// goes on to the next candidate), the old billing desk REDIRECTs to the expert (followed
// because the request allows spillover routing), and the expert accepts, reads the ticket
// from the handoff's context snapshot and completes the handoff. Triage is then fenced on the
// ticket's correlation: its next message about the ticket is refused. Every agent is
// deregistered at the end. The logic is in ./support.
//
// Start a server with `make dev`, then run `make example-handoff` (or
// `go run ./examples/handoff -server host:port`). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/handoff/support"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	wait := flag.Duration("wait", 2*time.Minute, "how long triage waits for the handoff to complete")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := support.Run(ctx, *server, support.Options{Wait: *wait})
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
