// Command debate runs the negotiation and debate example (RFC §17, §17.1–§17.4, ADR-011)
// against a running SW4RM server. Part 1 is a contract negotiation between a buyer and a
// seller over an API contract constrained by a JSON Schema: an invalid draft is refused with
// its reasons, then a proposal, an evaluation, a counter and an evaluation reach consensus;
// every §17.1 event is printed as it arrives, and the effective policy. Part 2 is ADR-011's
// A/B harness: three deterministic reviewer agents judge six designs with known verdicts, each
// as a two-round debate and as the parallel vote, and the accuracies and the lift are printed.
// The logic is in ./deliberation.
//
// Start a server with `make dev`, then run `make example-debate` (or
// `go run ./examples/debate -server host:port`). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/debate/deliberation"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for each negotiation to be decided")
	transcripts := flag.Bool("transcripts", false, "print every debate's transcript")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := deliberation.Run(ctx, *server, deliberation.Options{Wait: *wait, Transcripts: *transcripts})
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
