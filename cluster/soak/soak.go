// Package soak runs a soak: the mixed load of package loadgen against a cluster of package
// cluster, with faults injected on a schedule — kill -9 of a server and a worker, a Temporal
// restart, a PostgreSQL crash — and the figures printed every interval. It is what
// `sw4rm-cluster soak` and the CI soak test (test/soak) run (docs/reliability.md, "The
// soak").
package soak

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// Fault is one scheduled fault: the named cluster process is killed with SIGKILL (its whole
// process group, no shutdown of any kind) At into the load phase and started again after
// Down. Killing "postgres" is a crash (crash recovery from the WAL at its next start);
// killing "temporal" loses its in-memory state, as a machine's loss would.
type Fault struct {
	// At is when the fault strikes, from the start of the load phase.
	At time.Duration
	// Proc is the cluster process killed: server-1, worker-2, temporal, postgres.
	Proc string
	// Down is how long the process stays down before it is started again.
	Down time.Duration
}

// String is the fault as the schedule prints it.
func (f Fault) String() string {
	return fmt.Sprintf("%s kill -9 %s (down %s)", clock(f.At), f.Proc, f.Down)
}

// FaultRecord is what happened to one fault of the schedule.
type FaultRecord struct {
	Fault
	// Killed and Started are when the process was killed and when it served again.
	Killed, Started time.Time
	// Err is why the kill or the start failed, empty when both worked.
	Err string
}

// Schedule is the soak's fault profile: the processes in procs are killed one after the
// other, spacing apart, the first spacing into the load; the round starts again every cycle
// (0: once) for as long as duration leaves quiet, the last stretch of the load in which no
// fault strikes so that what the last one disturbed settles before the drain. Each process
// stays down for down.
func Schedule(duration, spacing, cycle, quiet, down time.Duration, procs ...string) []Fault {
	var out []Fault
	for start := time.Duration(0); ; start += cycle {
		for i, p := range procs {
			at := start + time.Duration(i+1)*spacing
			if at+down > duration-quiet {
				return out
			}
			out = append(out, Fault{At: at, Proc: p, Down: down})
		}
		if cycle <= 0 {
			return out
		}
	}
}

// DefaultProcs are the processes the default profile kills, in order: one server, one
// worker, Temporal and, when the cluster runs a PostgreSQL of its own, PostgreSQL.
func DefaultProcs(c *cluster.Cluster) []string {
	procs := []string{"server-1", "worker-2", "temporal"}
	if slices.Contains(c.Procs(), "postgres") {
		procs = append(procs, "postgres")
	}
	return procs
}

// Config is one soak.
type Config struct {
	// Load is the load; Run fills in the cluster's address, /metrics URLs and databases
	// where they are empty.
	Load loadgen.Config
	// Faults is the schedule; nil injects none.
	Faults []Fault
	// FlatTolerance is the growth Flat allows (0.5: half again); zero means 0.5.
	FlatTolerance float64
	// Warm is how far into the load the baseline of the flatness judgement is taken
	// (loadgen.FlatAfter); zero means a sixth of the load, at least a minute.
	Warm time.Duration
}

// Result is what a soak found.
type Result struct {
	// Summary is the load generator's, every interval's report and the final one.
	Summary loadgen.Summary
	// Faults are the faults injected, in order.
	Faults []FaultRecord
	// Flat reports whether memory and history per completed operation stayed flat, and Why
	// lists what grew when it did not.
	Flat bool
	Why  []string
	// CPU is the CPU time each cluster process (its whole process group) and the load
	// generator's own process ("loadgen") used from the start of the load to the end of the
	// drain, in seconds; a process killed meanwhile counts from its restart only. Divided
	// into the operations completed it sizes a deployment (docs/deploy.md, "Sizing").
	CPU map[string]float64
	// Elapsed is the time from the start of the load to the end of the drain.
	Elapsed time.Duration
}

// CPUTotal is the CPU seconds of every process in CPU.
func (r Result) CPUTotal() float64 {
	var sum float64
	for _, v := range r.CPU {
		sum += v
	}
	return sum
}

// Problems lists what makes the soak a failure: anything lost, doubled or stranded, a
// pattern that completed nothing, a fault that could not be injected or healed, growth
// that is not flat. Empty means the soak passed.
func (r Result) Problems() []string {
	var out []string
	lost, doubled, stranded := r.Summary.Final.Failures()
	if lost+doubled+stranded > 0 {
		out = append(out, fmt.Sprintf("%d lost, %d doubled, %d stranded", lost, doubled, stranded))
	}
	for _, p := range r.Summary.Final.Patterns {
		if p.Completed == 0 {
			out = append(out, fmt.Sprintf("pattern %s completed nothing", p.Pattern))
		}
	}
	for _, f := range r.Faults {
		if f.Err != "" {
			out = append(out, fmt.Sprintf("fault %s: %s", f.Fault, f.Err))
		}
	}
	if !r.Flat {
		out = append(out, "not flat: "+strings.Join(r.Why, "; "))
	}
	return out
}

// Run runs the soak against c: the load for cfg.Load.Duration with cfg.Faults injected on
// their schedule, then the drain, and reports every interval on out. It returns once the
// load generator has accounted for every operation and every killed process serves again.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config, out io.Writer) (Result, error) {
	load := cfg.Load
	if load.Addr == "" {
		load.Addr = c.Addr()
	}
	if load.MetricsURLs == nil {
		urls := c.MetricsURLs()
		for _, name := range c.Procs() {
			if u, ok := urls[name]; ok {
				load.MetricsURLs = append(load.MetricsURLs, name+"="+u)
			}
		}
	}
	if load.DatabaseURL == "" {
		load.DatabaseURL = c.DatabaseURL()
	}
	if load.TemporalDatabaseURL == "" {
		load.TemporalDatabaseURL = c.TemporalDatabaseURL()
	}
	tol := cfg.FlatTolerance
	if tol == 0 {
		tol = 0.5
	}
	var mu sync.Mutex
	printf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, args...)
	}
	printf("soak: load %s, drain %s, %d faults:\n", load.Duration, load.Drain, len(cfg.Faults))
	for _, f := range cfg.Faults {
		printf("soak:   %s\n", f)
	}

	// The faults run beside the load, on the load phase's clock; they stop with it.
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	records := make([]FaultRecord, len(cfg.Faults))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for i, f := range cfg.Faults {
			select {
			case <-faultCtx.Done():
				records = records[:i]
				return
			case <-time.After(time.Until(start.Add(f.At))):
			}
			records[i] = inject(ctx, c, f, printf)
		}
	}()

	w := &lockedWriter{mu: &mu, w: out}
	cpu0, self0, t0 := c.CPUSeconds(), selfCPU(), time.Now()
	sum, err := loadgen.Run(ctx, load, w)
	cpu1, self1, elapsed := c.CPUSeconds(), selfCPU(), time.Since(t0)
	stopFaults()
	wg.Wait()
	res := Result{Summary: sum, Faults: records, Elapsed: elapsed, CPU: map[string]float64{"loadgen": self1 - self0}}
	for name, v := range cpu1 {
		// A process restarted by a fault starts its count again: only what it used since.
		res.CPU[name] = v
		if v0 := cpu0[name]; v0 <= v {
			res.CPU[name] = v - v0
		}
	}
	writeCPU(out, &mu, res)
	if err != nil {
		return res, err
	}
	warm := cfg.Warm
	if warm == 0 {
		warm = max(time.Minute, load.Duration/6)
	}
	res.Flat, res.Why = loadgen.FlatAfter(sum, tol, warm)
	return res, nil
}

// inject kills f.Proc, waits f.Down and starts it again, waiting until it serves. The start
// is given the parent context (not the fault loop's), so a process killed near the end of
// the load still comes back before the drain's accounting.
func inject(ctx context.Context, c *cluster.Cluster, f Fault, printf func(string, ...any)) FaultRecord {
	r := FaultRecord{Fault: f, Killed: time.Now()}
	if err := c.Kill(f.Proc); err != nil {
		r.Err = "kill: " + err.Error()
		printf("soak: %s: %s\n", f, r.Err)
		return r
	}
	printf("soak: %s — killed\n", f)
	select {
	case <-ctx.Done():
	case <-time.After(f.Down):
	}
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if err := c.Start(startCtx, f.Proc); err != nil {
		r.Err = "start: " + err.Error()
		printf("soak: %s: %s\n", f, r.Err)
		return r
	}
	r.Started = time.Now()
	printf("soak: %s — serving again after %s\n", f, r.Started.Sub(r.Killed).Round(100*time.Millisecond))
	return r
}

// writeCPU prints what each process spent, and the cluster's operations per CPU second.
func writeCPU(out io.Writer, mu *sync.Mutex, r Result) {
	if len(r.CPU) == 0 {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(r.CPU))
	for n := range r.CPU {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(out, "soak: CPU over %s:", r.Elapsed.Round(time.Second))
	for _, n := range names {
		fmt.Fprintf(out, " %s=%.1fs", n, r.CPU[n])
	}
	total := r.CPUTotal()
	fmt.Fprintf(out, "; total %.1fs (%.2f cores)", total, total/r.Elapsed.Seconds())
	if done := r.Summary.Final.Completed(); total > 0 {
		fmt.Fprintf(out, "; %.1f operations per CPU second", float64(done)/total)
	}
	fmt.Fprintln(out)
}

// selfCPU is this process's CPU time so far, in seconds (the load generator's own share).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// lockedWriter serialises the load generator's reports with the fault lines.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// clock prints d as m:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
