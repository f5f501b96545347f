package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/soak"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// saturating is each pattern's load for sizing: a rate beyond what the cluster completes on
// a 2-core machine, with enough in flight to keep every part busy, so that the figure is the
// cluster's throughput, not the load generator's pace.
var saturating = map[loadgen.Pattern]loadgen.PatternConfig{
	loadgen.Messages:     {Rate: 3000, Concurrency: 128},
	loadgen.Tasks:        {Rate: 100, Concurrency: 16},
	loadgen.DAG:          {Rate: 50, Concurrency: 16},
	loadgen.Handoffs:     {Rate: 200, Concurrency: 32},
	loadgen.Negotiations: {Rate: 100, Concurrency: 32},
	loadgen.Tools:        {Rate: 500, Concurrency: 64},
	loadgen.HITL:         {Rate: 100, Concurrency: 32},
}

// sizingCmd starts one cluster and runs each pattern alone at a saturating load, without
// faults, then prints per pattern the operations per second and per CPU second of the
// cluster and how the CPU split between its parts (docs/deploy.md, "Sizing").
func sizingCmd(args []string) error {
	fs := flag.NewFlagSet("sw4rm-cluster sizing", flag.ContinueOnError)
	o, complete := clusterFlags(fs, false)
	var (
		duration = fs.Duration("duration", time.Minute, "load of each pattern")
		fsync    = fs.Bool("fsync", true, "the cluster's own PostgreSQL flushes its WAL at each commit, as a deployment's does")
		patterns = fs.String("patterns", "all", "patterns to size, in order, name[=rate[/concurrency]],…; a pattern without a load takes a saturating one")
	)
	var (
		pats  map[loadgen.Pattern]loadgen.PatternConfig
		token string
	)
	prepare := func() (err error) {
		if pats, err = loadgen.ParsePatterns(*patterns); err != nil {
			return err
		}
		o.Fsync = *fsync
		token, err = soakOperator(o)
		return err
	}
	return start(fs, args, complete, func(ctx context.Context, c *cluster.Cluster) error {
		return sizeOn(ctx, c, *duration, pats, token)
	}, prepare, o)
}

// sizeOn runs each pattern of pats alone on the started cluster c and prints the table.
func sizeOn(ctx context.Context, c *cluster.Cluster, duration time.Duration, pats map[loadgen.Pattern]loadgen.PatternConfig, token string) error {
	type row struct {
		p   loadgen.Pattern
		pr  loadgen.PatternReport
		res soak.Result
	}
	var rows []row
	for _, p := range loadgen.AllPatterns {
		pc, ok := pats[p]
		if !ok {
			continue
		}
		if pc == (loadgen.PatternConfig{}) {
			pc = saturating[p]
		}
		fmt.Printf("sizing %s at %.0f/s, %d in flight, for %s\n", p, pc.Rate, pc.Concurrency, duration)
		res, err := soak.Run(ctx, c, soak.Config{Load: loadgen.Config{
			Duration: duration, Drain: time.Minute, Interval: duration, OperatorToken: token,
			Patterns: map[loadgen.Pattern]loadgen.PatternConfig{p: pc},
		}}, io.Discard)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		pr, _ := res.Summary.Final.Pattern(p)
		rows = append(rows, row{p, pr, res})
		fmt.Printf("  %d completed, p50 %s p99 %s, CPU %.1fs\n", pr.Completed, pr.P50.Round(time.Millisecond), pr.P99.Round(time.Millisecond), res.CPUTotal())
	}

	names := []string{}
	for _, r := range rows {
		for n := range r.res.CPU {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	fmt.Printf("\n| pattern | ops/s | cores busy | ops per core-second | p50 | p99 | lost/doubled/stranded | CPU share: %s |\n", strings.Join(names, ", "))
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		secs := r.res.Elapsed.Seconds()
		total := r.res.CPUTotal()
		var share []string
		for _, n := range names {
			share = append(share, fmt.Sprintf("%.0f%%", 100*r.res.CPU[n]/total))
		}
		lost, doubled, stranded := r.pr.Lost, r.pr.Doubled, r.pr.Stranded
		fmt.Printf("| %s | %.1f | %.2f | %.1f | %s | %s | %d/%d/%d | %s |\n", r.p, float64(r.pr.Completed)/secs, total/secs,
			float64(r.pr.Completed)/total, r.pr.P50.Round(time.Millisecond), r.pr.P99.Round(time.Millisecond),
			lost, doubled, stranded, strings.Join(share, ", "))
	}
	return nil
}
