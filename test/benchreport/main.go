// Command benchreport reads `go test -bench` output on stdin and prints every benchmark next
// to the baselines measured in the same run (the Benchmark*Baseline* results), as ratios of
// time per operation: shared machines are noisy, so only same-run ratios are comparable.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// baselineOf pairs each benchmark with the baseline it is judged against; a benchmark with
// no entry is compared with every baseline, and one whose entry is "" has no baseline.
var baselineOf = map[string]string{
	"RouterSendToFulfilled": "BaselineRawPostgres",
	"RouterThroughput":      "BaselineRawPostgres",
	"RoomDecision":          "BaselineBareTemporalRoom",
	"PreemptRequest":        "BaselineBareTemporalSignal",
	"TaskRoundTrip":         "BaselineBareTemporalTask",
	"TaskSaturation":        "BaselineBareTemporalSaturation",
	"HandoffRoundTrip":      "BaselineBareTemporalHandoff",
	"NegotiationRound":      "BaselineBareTemporalNegotiation",
	"DAGRun":                "BaselineBareTemporalDAG", // sub-benchmarks pair by name: chain with chain
	"ToolCall":              "BaselineBareTemporalTool",
	"ToolCancel":            "", // Cancel → final frame: bare Temporal has nothing like it to compare with
}

type result struct {
	name    string
	nsPerOp float64
	metrics map[string]float64
}

var line = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)$`)

func main() {
	var results []result
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[3], 64)
		r := result{name: strings.TrimPrefix(m[1], "Benchmark"), nsPerOp: ns, metrics: map[string]float64{}}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				r.metrics[f[i+1]] = v
			}
		}
		results = append(results, r)
	}
	var baselines, subjects []result
	for _, r := range results {
		if strings.HasPrefix(r.name, "Baseline") {
			baselines = append(baselines, r)
		} else {
			subjects = append(subjects, r)
		}
	}
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "benchreport: no benchmark results on stdin")
		os.Exit(1)
	}
	fmt.Printf("\n%-40s %12s %10s %10s %12s", "benchmark", "msgs/s", "p50 ms", "p99 ms", "deliver p99")
	for _, b := range baselines {
		fmt.Printf("  %s", "× "+b.name)
	}
	fmt.Println()
	for _, r := range append(subjects, baselines...) {
		dp := "-"
		if v, ok := r.metrics["deliver-p99-ms"]; ok {
			dp = fmt.Sprintf("%.3f", v)
		}
		num := func(key, format string) string {
			if v, ok := r.metrics[key]; ok {
				return fmt.Sprintf(format, v)
			}
			return "-"
		}
		fmt.Printf("%-40s %12s %10s %10s %12s", r.name, num("msgs/s", "%.1f"), num("p50-ms", "%.3f"), num("p99-ms", "%.3f"), dp)
		for _, b := range baselines {
			parts := strings.SplitN(r.name, "/", 2)
			want, ok := baselineOf[parts[0]]
			if ok && len(parts) == 2 && strings.HasPrefix(b.name, want+"/") {
				want += "/" + parts[1] // a baseline with sub-benchmarks pairs sub with sub
			}
			if strings.HasPrefix(r.name, "Baseline") {
				want, ok = r.name, true
			}
			if ok && want != b.name {
				fmt.Printf("  %*s", len(b.name)+2, "")
				continue
			}
			fmt.Printf("  %*.2f", len(b.name)+2, r.nsPerOp/b.nsPerOp)
		}
		fmt.Println()
	}
	fmt.Println("\ndeliver p99: ms from SendMessage to the recipient's stream. × columns: time per operation")
	fmt.Println("divided by the baseline's, measured in the same run (below 2.0 = at least half the baseline's rate).")
	variants(subjects)
	alternations(subjects)
}

// alternationTarget is the largest on/off ratio of a benchmark that runs one system with a
// feature on and off by turns (BenchmarkRouterTracing: tracing with every span sampled,
// docs/observability.md).
const alternationTarget = 1.15

// offTarget is the largest ratio of a round trip with tracing off to one without tracing.
const offTarget = 1.02

// alternations prints the benchmarks that report an on/off ratio of their own, and what
// tracing off adds to a round trip: BenchmarkTracingOff's checks of one round trip, over the
// round trip's time in the same run.
func alternations(subjects []result) {
	var off *result
	for i := range subjects {
		if subjects[i].name == "TracingOff" {
			off = &subjects[i]
		}
	}
	if off != nil {
		for _, r := range subjects {
			if strings.HasPrefix(r.name, "RouterSendToFulfilled/") && !strings.Contains(r.name, "-") {
				fmt.Printf("\ntracing off: %s + %.0f ns of checks = %.4f × the round trip   ≤ %.2f", r.name, off.nsPerOp, 1+off.nsPerOp/r.nsPerOp, offTarget)
			}
		}
		fmt.Println()
	}
	printed := false
	for _, r := range subjects {
		ratio, ok := r.metrics["on/off"]
		if !ok {
			continue
		}
		if !printed {
			fmt.Println("\non and off by turns, one system            on µs     off µs    on/off   target   CPU on/off")
			printed = true
		}
		fmt.Printf("%-40s %9.1f  %9.1f  %7.2f   ≤ %.2f   %10.2f\n", r.name, r.metrics["on-us"], r.metrics["off-us"], ratio, alternationTarget, r.metrics["cpu-on/off"])
	}
}

// variantTargets are benchmarks run twice in one run, once with a feature on: the suffix of
// the variant's name, and the largest ratio of its time per operation to the plain run's.
var variantTargets = map[string]float64{
	"-auth-required": 1.10, // SW4RM_AUTH=required with every call signed, next to off (docs/security.md)
	"-http1":         1.50, // the same over HTTP/1.1 with the Connect protocol, next to native gRPC (docs/http1.md)
}

// variants prints each variant next to its plain run, e.g. RouterThroughput/postgres-auth-required
// next to RouterThroughput/postgres.
func variants(subjects []result) {
	byName := map[string]result{}
	for _, r := range subjects {
		byName[r.name] = r
	}
	printed := false
	for _, r := range subjects {
		for suffix, target := range variantTargets {
			plain, ok := byName[strings.TrimSuffix(r.name, suffix)]
			if !strings.HasSuffix(r.name, suffix) || !ok {
				continue
			}
			if !printed {
				fmt.Println("\nvariant                                   × plain run   target")
				printed = true
			}
			fmt.Printf("%-40s %12.2f   ≤ %.2f\n", r.name, r.nsPerOp/plain.nsPerOp, target)
		}
	}
}
