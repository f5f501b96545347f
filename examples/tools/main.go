// Command tools runs the tools example (RFC §18) against a running SW4RM server: an agent
// binds a worktree of a Go module whose test fails, reads the code through an MCP
// filesystem server confined to the worktree, runs the tests through the built-in process
// tool, fixes the code with the filesystem server's edit_file, runs the tests again, and
// shows that neither provider reaches outside the worktree. The logic is in ./coder.
//
// `make dev` serves the module's repository and the filesystem server; then run `make
// example-tools` (or `go run ./examples/tools -server host:port`). Whatever happens, the run
// ends by unbinding its worktree and deregistering its agent. `go run ./examples/tools -seed
// DIR` makes the module's git repository in DIR, for a server of your own (README.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/examples/tools/coder"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	seedDir := flag.String("seed", "", "make the example's git repository in this directory and exit")
	timeout := flag.Duration("timeout", 2*time.Minute, "bound of each test run")
	flag.Parse()

	if *seedDir != "" {
		if err := coder.Seed(*seedDir); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		fmt.Printf("seeded %s\n", *seedDir)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rep, err := coder.Run(ctx, *server, coder.Options{Out: os.Stdout, Timeout: *timeout})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nerror:", err)
		os.Exit(1)
	}
	if rep.FirstRun == "" || rep.SecondRun != "" {
		fmt.Fprintf(os.Stderr, "\nunexpected: first test run %q, second %q\n", rep.FirstRun, rep.SecondRun)
		os.Exit(1)
	}
	fmt.Println("\nthe test failed, was fixed through the filesystem server, and passes")
}

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
