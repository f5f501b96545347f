// Command sw4rm-cluster runs a production-shaped SW4RM cluster on one machine in the
// foreground (package cluster): PostgreSQL, a Temporal server with several history shards,
// two `sw4rm server` processes behind a load balancer and three `sw4rm worker` processes.
// It prints the addresses, and Ctrl-C stops everything. `make cluster` builds what it needs
// and runs `sw4rm-cluster up`.
//
//	sw4rm-cluster up [-fresh] [-own-postgres] [-base-port 16000] [-state .cluster] ...
//	sw4rm-cluster soak [-duration 3m] [-fault-cycle 0] [-json FILE] [cluster flags] ...
//
// soak starts the cluster (with a PostgreSQL of its own unless -own-postgres=false), runs
// the soak of package cluster/soak against it — loadgen's mixed load with kill -9 of a
// server and a worker, Temporal and PostgreSQL killed and restarted on a schedule — prints
// the figures every -interval and exits 1 on anything lost, doubled or stranded, or on
// memory or history per operation that did not stay flat. `make soak` runs it.
//
//	sw4rm-cluster sizing [-duration 1m] [-patterns all] [cluster flags] ...
//
// sizing starts the cluster and runs each pattern alone at a saturating load without
// faults, then prints a table of operations per second, per CPU second and the CPU each part
// of the cluster spent (docs/deploy.md, "Sizing"). `make sizing` runs it.
//
// Every SW4RM_* setting of sw4rm in the environment (SW4RM_AUTH, SW4RM_HITL_OPERATORS, …)
// is passed to every sw4rm process, except those the cluster sets itself: the Temporal
// address, namespace, task queue, database URL and listen addresses. SW4RM_DATABASE_URL
// names the PostgreSQL server the cluster creates its databases in.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/cluster"
)

// kitSettings are the settings the cluster gives each sw4rm process itself.
var kitSettings = []string{"SW4RM_TEMPORAL_ADDRESS", "SW4RM_NAMESPACE", "SW4RM_TASK_QUEUE",
	"SW4RM_DATABASE_URL", "SW4RM_GRPC_ADDR", "SW4RM_HTTP_ADDR"}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sw4rm-cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	const usage = "usage: sw4rm-cluster up|soak|sizing [flags]; sw4rm-cluster up -h lists the flags"
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "up":
		return up(args[1:])
	case "soak":
		return soakCmd(args[1:])
	case "sizing":
		return sizingCmd(args[1:])
	}
	return errors.New(usage)
}

// clusterFlags declares the flags that shape the cluster on fs; the returned function
// completes the options once fs is parsed.
func clusterFlags(fs *flag.FlagSet, ownPGDefault bool) (*cluster.Options, func()) {
	defURL := os.Getenv("SW4RM_DATABASE_URL")
	if defURL == "" {
		defURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	var (
		o       cluster.Options
		pgURL   = fs.String("postgres-url", defURL, "PostgreSQL server to create the cluster's databases in (default: $SW4RM_DATABASE_URL, else the local server)")
		ownPG   = fs.Bool("own-postgres", ownPGDefault, "make a PostgreSQL cluster of its own with initdb in the state directory instead")
		envFlag multiFlag
	)
	fs.StringVar(&o.StateDir, "state", ".cluster", "state directory: logs, Temporal's config, the own PostgreSQL")
	fs.BoolVar(&o.Fresh, "fresh", false, "drop and recreate the cluster's databases first")
	fs.StringVar(&o.DBPrefix, "db-prefix", "sw4rm_cluster", "prefix of the database names")
	fs.IntVar(&o.BasePort, "base-port", 16000, "first port: load balancer +0, server-i +i, /metrics +10+i (servers) and +20+i (workers), Temporal +30..+39, own PostgreSQL +40")
	fs.IntVar(&o.Servers, "servers", 2, "sw4rm server processes")
	fs.IntVar(&o.Workers, "workers", 3, "sw4rm worker processes")
	fs.IntVar(&o.HistoryShards, "history-shards", 4, "Temporal history shards (fixed when its database is created)")
	fs.StringVar(&o.Namespace, "namespace", "sw4rm", "Temporal namespace")
	fs.DurationVar(&o.Retention, "retention", 7*24*time.Hour, "the namespace's retention of closed workflows")
	fs.StringVar(&o.SW4RM, "sw4rm", "bin/sw4rm", "sw4rm binary")
	fs.StringVar(&o.TemporalServer, "temporal-server", cluster.FindTool("temporal-server"), "temporal-server binary")
	fs.StringVar(&o.SQLTool, "sql-tool", cluster.FindTool("temporal-sql-tool"), "temporal-sql-tool binary")
	fs.Var(&envFlag, "env", "extra NAME=value for every sw4rm process (repeatable)")
	return &o, func() {
		if !*ownPG {
			o.PostgresURL = *pgURL
		}
		o.Env = append(passThrough(), envFlag...)
		o.Logf = func(format string, args ...any) {
			fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
}

// up runs the cluster until SIGINT or SIGTERM.
func up(args []string) error {
	fs := flag.NewFlagSet("sw4rm-cluster up", flag.ContinueOnError)
	o, complete := clusterFlags(fs, false)
	return start(fs, args, complete, func(ctx context.Context, c *cluster.Cluster) error {
		printAddresses(c)
		<-ctx.Done()
		fmt.Println("stopping…")
		return nil
	}, func() error { return nil }, o)
}

// start is what every subcommand shares: parse its flags (-h prints them and ends), complete
// the cluster's options, prepare (the subcommand's own checks and settings), start the
// cluster and run body until it returns or SIGINT or SIGTERM ends its context, then stop the
// cluster.
func start(fs *flag.FlagSet, args []string, complete func(), body func(context.Context, *cluster.Cluster) error, prepare func() error, o *cluster.Options) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	complete()
	if err := prepare(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, *o)
	if err != nil {
		return err
	}
	defer c.Stop()
	return body(ctx, c)
}

// passThrough returns the sw4rm settings set in the environment, but for the kit's own.
func passThrough() []string {
	var env []string
	for _, s := range app.Settings() {
		if slices.Contains(kitSettings, s.Env) {
			continue
		}
		if v, ok := os.LookupEnv(s.Env); ok {
			env = append(env, s.Env+"="+v)
		}
	}
	return env
}

func printAddresses(c *cluster.Cluster) {
	fmt.Printf(`
SW4RM cluster is up (state and logs in %s/logs).
  gRPC (load balancer):  %s        e.g. SW4RM_SERVER=%s make example-dag
  sw4rm servers:         %s
  Temporal frontend:     %s   namespace %s
    bin/temporal workflow list --address %s --namespace %s
    Temporal UI: not part of temporal-server; run the temporalio/ui server (docker image
    temporalio/ui) with TEMPORAL_ADDRESS=%s, or use the CLI above.
  SW4RM database:        %s
  /metrics:
`, c.StateDir(), c.Addr(), c.Addr(), strings.Join(c.ServerAddrs(), ", "), c.TemporalAddr(), c.Namespace(),
		c.TemporalAddr(), c.Namespace(), c.TemporalAddr(), c.DatabaseURL())
	urls := c.MetricsURLs()
	for _, name := range c.Procs() {
		if u, ok := urls[name]; ok {
			fmt.Printf("    %-10s %s\n", name, u)
		}
	}
	fmt.Println("Ctrl-C stops everything.")
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q: want NAME=value", v)
	}
	*m = append(*m, v)
	return nil
}
