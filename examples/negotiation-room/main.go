// Command negotiation-room runs a code-review negotiation room (RFC §17.5) against a running
// SW4RM server: a producer agent submits a Go change as a CODE proposal, three critic agents
// (tests, style, security) receive it on their streams, review it with simple deterministic
// heuristics and vote, and the server's coordinator workflow decides by policy. When the
// decision is REVISION_REQUESTED the producer submits its revision under the same artifact_id
// and waits for the decision on the new version. The logic is in ./codereview.
//
// Start a server with `make dev`, then run `make example-room` (or
// `go run ./examples/negotiation-room -server host:port`). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/negotiation-room/codereview"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	roomID := flag.String("room", envOr("SW4RM_ROOM", codereview.DefaultRoom), "negotiation room id (SW4RM_ROOM)")
	wait := flag.Duration("wait", 2*time.Minute, "how long the producer waits for each decision")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := codereview.Run(ctx, *server, codereview.Options{Room: *roomID, Wait: *wait})
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
