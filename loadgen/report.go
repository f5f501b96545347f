package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PatternReport is one pattern's figures at a report.
type PatternReport struct {
	// Pattern names it.
	Pattern Pattern `json:"pattern"`
	// Started counts the operations started so far; Acked those the system acknowledged.
	Started int64 `json:"started"`
	Acked   int64 `json:"acked"`
	// Completed, Failed and Refused count the operations that ended so.
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Refused   int64 `json:"refused"`
	// Unanswered counts operations none of whose attempts got an answer (final report only).
	Unanswered int64 `json:"unanswered"`
	// InFlight counts operations still going (not in the final report).
	InFlight int64 `json:"in_flight"`
	// Lost, Doubled and Stranded are the correctness failures (see the pattern constants).
	// Before the final report, Lost and Stranded count only operations older than the
	// operation timeout.
	Lost     int64 `json:"lost"`
	Doubled  int64 `json:"doubled"`
	Stranded int64 `json:"stranded"`
	// Errors counts attempts that failed without a protocol answer; Retries the calls that
	// needed more than one attempt.
	Errors  int64 `json:"errors"`
	Retries int64 `json:"retries"`
	// IntervalCompleted counts completions in the interval (the final report: in the run),
	// and OpsPerSec is their rate.
	IntervalCompleted int64   `json:"interval_completed"`
	OpsPerSec         float64 `json:"ops_per_sec"`
	// P50, P95 and P99 are latency percentiles of the interval's completions (the final
	// report: of the whole run's).
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	// Notes are pattern-specific counters, such as the tasks pattern's "preempted".
	Notes map[string]int64 `json:"notes,omitempty"`
}

// ProcessReport is one process's figures, scraped from its /metrics.
type ProcessReport struct {
	// Name is the process's name, given as name=url in Config.MetricsURLs; else its URL.
	Name string `json:"name"`
	// URL is the /metrics URL.
	URL string `json:"url"`
	// Goroutines is go_goroutines.
	Goroutines float64 `json:"goroutines"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes (Temporal's memory_heapinuse).
	HeapInuseBytes float64 `json:"heap_inuse_bytes"`
	// LiveHeapBytes is go_gc_heap_live_bytes, the heap the last GC found live (0 where the
	// process does not export it). Heap in use swings up to twice this between
	// collections, so Flat judges memory by it when both samples have it.
	LiveHeapBytes float64 `json:"live_heap_bytes,omitempty"`
	// RSSBytes is process_resident_memory_bytes (0 where the platform has none).
	RSSBytes float64 `json:"rss_bytes"`
	// Error is why the scrape failed, empty when it did not.
	Error string `json:"error,omitempty"`
}

// TableSize is one table's size.
type TableSize struct {
	// Name is the table's name.
	Name string `json:"name"`
	// Rows is the planner's live row estimate (pg_stat_user_tables.n_live_tup).
	Rows int64 `json:"rows"`
	// Bytes is pg_total_relation_size: the table with its indexes and TOAST.
	Bytes int64 `json:"bytes"`
}

// DatabaseReport is a database's size, by table.
type DatabaseReport struct {
	// TotalRows and TotalBytes sum the tables.
	TotalRows  int64 `json:"total_rows"`
	TotalBytes int64 `json:"total_bytes"`
	// Tables are the tables, largest first.
	Tables []TableSize `json:"tables"`
	// Error is why it could not be read, empty when it could.
	Error string `json:"error,omitempty"`
}

// Report is the figures at one moment of the run.
type Report struct {
	// At is when it was made; Elapsed the time since Run started the load.
	At      time.Time     `json:"at"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Phase is "load", "drain" or "final".
	Phase string `json:"phase"`
	// Patterns are the patterns' figures, in AllPatterns order.
	Patterns []PatternReport `json:"patterns"`
	// Processes are the scraped processes, in Config.MetricsURLs order.
	Processes []ProcessReport `json:"processes,omitempty"`
	// Store is the sw4rm store's size, nil without Config.DatabaseURL.
	Store *DatabaseReport `json:"store,omitempty"`
	// History is the size of Temporal's history tables, nil without
	// Config.TemporalDatabaseURL.
	History *DatabaseReport `json:"history,omitempty"`
}

// Completed sums the completed operations of every pattern.
func (r Report) Completed() int64 {
	var n int64
	for _, p := range r.Patterns {
		n += p.Completed
	}
	return n
}

// Pattern returns the figures of pattern p, and false when p did not run.
func (r Report) Pattern(p Pattern) (PatternReport, bool) {
	for _, pr := range r.Patterns {
		if pr.Pattern == p {
			return pr, true
		}
	}
	return PatternReport{}, false
}

// Failures sums lost, doubled and stranded operations over every pattern.
func (r Report) Failures() (lost, doubled, stranded int64) {
	for _, p := range r.Patterns {
		lost += p.Lost
		doubled += p.Doubled
		stranded += p.Stranded
	}
	return lost, doubled, stranded
}

// Write prints the report for a person.
func (r Report) Write(w io.Writer) {
	fmt.Fprintf(w, "loadgen %s at %s (elapsed %s)\n", r.Phase, r.At.Format(time.RFC3339), r.Elapsed.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pattern\tstarted\tdone\tops/s\tp50\tp95\tp99\tfailed\trefused\terrors\tretries\tlost\tdoubled\tstranded\tin-flight\t")
	for _, p := range r.Patterns {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Pattern, p.Started, p.Completed, p.OpsPerSec,
			ms(p.P50), ms(p.P95), ms(p.P99), p.Failed, p.Refused, p.Errors, p.Retries, p.Lost, p.Doubled, p.Stranded, p.InFlight)
	}
	_ = tw.Flush()
	for _, p := range r.Patterns {
		if len(p.Notes) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", p.Pattern, notesString(p.Notes))
		}
	}
	for _, p := range r.Processes {
		if p.Error != "" {
			fmt.Fprintf(w, "  process %s: %s\n", p.Name, p.Error)
			continue
		}
		live := ""
		if p.LiveHeapBytes > 0 {
			live = " live_heap=" + mib(p.LiveHeapBytes)
		}
		fmt.Fprintf(w, "  process %s: goroutines=%.0f heap_inuse=%s%s rss=%s\n", p.Name, p.Goroutines, mib(p.HeapInuseBytes), live, mib(p.RSSBytes))
	}
	writeDB(w, "store", r.Store)
	writeDB(w, "temporal history", r.History)
}

func writeDB(w io.Writer, name string, d *DatabaseReport) {
	if d == nil {
		return
	}
	if d.Error != "" {
		fmt.Fprintf(w, "  %s: %s\n", name, d.Error)
		return
	}
	var top []string
	for _, t := range d.Tables[:min(len(d.Tables), 5)] {
		top = append(top, fmt.Sprintf("%s=%s/%d rows", t.Name, mib(float64(t.Bytes)), t.Rows))
	}
	fmt.Fprintf(w, "  %s: %s, %d rows (%s)\n", name, mib(float64(d.TotalBytes)), d.TotalRows, strings.Join(top, " "))
}

func notesString(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

func mib(b float64) string { return fmt.Sprintf("%.1fMiB", b/(1<<20)) }

// scrape reads the process figures from one /metrics URL.
func scrape(ctx context.Context, client *http.Client, target string) ProcessReport {
	name, url, named := strings.Cut(target, "=")
	if !named {
		name, url = target, target
	}
	pr := ProcessReport{Name: name, URL: url}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	// The text format: the parser below reads it, whatever the server prefers.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		pr.Error = resp.Status
		return pr
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		pr.Error = "parse: " + err.Error()
		return pr
	}
	gauge := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			return 0
		}
		m := f.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetUntyped().GetValue()
	}
	// A Go process's client_golang names first, then the Temporal server's own runtime
	// gauges, which it exports instead.
	first := func(names ...string) float64 {
		for _, n := range names {
			if v := gauge(n); v != 0 {
				return v
			}
		}
		return 0
	}
	pr.Goroutines = first("go_goroutines", "num_goroutines")
	pr.HeapInuseBytes = first("go_memstats_heap_inuse_bytes", "memory_heapinuse")
	pr.LiveHeapBytes = gauge("go_gc_heap_live_bytes")
	pr.RSSBytes = gauge("process_resident_memory_bytes")
	return pr
}

// tableSizes reads the user tables' sizes of the database at url; only tables whose name
// matches one of like (SQL LIKE patterns) when like is not empty.
func tableSizes(ctx context.Context, url string, like []string) *DatabaseReport {
	d := &DatabaseReport{}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	q := `SELECT relname, n_live_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables`
	args := []any{}
	if len(like) > 0 {
		q += ` WHERE relname LIKE ANY($1)`
		args = append(args, like)
	}
	rows, err := conn.Query(ctx, q+` ORDER BY 3 DESC`, args...)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	for rows.Next() {
		var t TableSize
		if err := rows.Scan(&t.Name, &t.Rows, &t.Bytes); err != nil {
			d.Error = err.Error()
			return d
		}
		d.Tables = append(d.Tables, t)
		d.TotalRows += t.Rows
		d.TotalBytes += t.Bytes
	}
	if err := rows.Err(); err != nil {
		d.Error = err.Error()
	}
	return d
}

// historyTables are the tables of Temporal's SQL persistence that grow with workflow
// history: the events (history_node), their branches, and the executions.
var historyTables = []string{"history_node", "history_tree", "executions", "current_executions", "timer_tasks", "transfer_tasks"}
