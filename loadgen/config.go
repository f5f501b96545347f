// Package loadgen is SW4RM's load generator: a bounded, mixed swarm that drives a deployment
// through its public gRPC API with the Go SDK, exactly as agent processes and operators do,
// for a set time, and then accounts for every operation it started. It is the core of the
// soak: the soak harness starts a cluster, injects faults on a schedule and calls Run; `sw4rm
// loadgen` runs it against any deployment.
//
// Each pattern (messages, tasks with preemption, DAG runs, handoffs, negotiations, tool calls,
// HITL approvals) starts operations at its own rate with a bound on how many are in flight.
// An operation is retried as the protocol prescribes when it gets no answer — the same
// idempotency token, task_id, call_id, request_id or sw4rm-idempotency-key — so that the
// system's faults (a server or worker killed, Temporal or PostgreSQL restarting) show up as
// latency, not as double work. After the load phase a drain phase waits for everything
// started to finish; then every operation is exactly one of completed, failed (the system
// answered with a protocol failure), refused (a protocol refusal at submission), unanswered
// (no attempt was ever acknowledged), lost or stranded; doubled counts completed operations
// whose side effect was seen more than once. The per-pattern definitions are on the pattern
// constants.
//
// Every Interval (a minute by default) and at the end Run reports per pattern the operations
// done, their rate, latency percentiles, errors and the lost/doubled/stranded counts so far;
// the memory and goroutines of the processes whose /metrics it is given; the growth of the
// sw4rm store and of Temporal's history tables when it is given their databases. Flat judges
// from a Summary whether memory and history per completed operation stayed flat.
package loadgen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// Pattern names one kind of load.
type Pattern string

// The patterns. Each operation's latency runs from its first attempt to its completion.
const (
	// Messages: a producer sends a DATA message with an idempotency token to a consumer that
	// reads its stream and confirms every delivery (AckDelivery). A send with no answer is
	// retried with the same token, a new message_id and retry_count+1 (§11.2, §11.3); an
	// already_in_progress or duplicate_detected answer to a retry means an earlier attempt
	// was admitted. Completed: the consumer received it. Lost: admitted and never delivered.
	// Doubled: delivered under two message_ids, or delivered again after its confirmation
	// was recorded. Refused: any other protocol rejection (buffer_full is retried).
	Messages Pattern = "messages"
	// Tasks: one operation is a pair of tasks for one serving agent (sdk.Agent.Serve): a
	// low-priority one (priority 10) that works in small steps with a safe point between
	// them, and, once it runs, a high-priority one (priority -5) whose submission makes the
	// scheduler preempt it (§7.2); the first yields, the second runs, the first resumes. A
	// submission with no answer is retried with the same task_id (a duplicate_detected answer
	// to a retry means the earlier attempt went through). Completed: both handlers returned a
	// result. Doubled: a task's handler ran to completion more than once. Stranded: a task
	// the activity buffer still lists as active after the drain. Failed: the scheduler
	// refused or failed a task. Note "preempted" counts yields.
	Tasks Pattern = "tasks"
	// DAG: a small fan-out (root → Fan nodes → join) created with CreateWorkflow and started
	// with StartWorkflow; nodes are tasks served by agents. A start with no answer is
	// retried (already_in_progress means it started). Completed: GetWorkflowState reports the
	// run COMPLETED. Failed: FAILED or WAITING (a node failed). Doubled: a node's handler ran
	// to completion more than once. Stranded: still RUNNING after the drain.
	DAG Pattern = "dag"
	// Handoffs: an originator requests a handoff (a new request_id) to a named target, which
	// finds it with GetPendingHandoffs, accepts and completes it. A request with no answer is
	// retried with the same request_id. Completed: GetHandoff reports COMPLETED. Failed:
	// REJECTED, EXPIRED or CANCELLED. Doubled: the target was offered the same request again
	// after it completed it. Stranded: PENDING or ACCEPTED after the drain.
	Handoffs Pattern = "handoffs"
	// Negotiations: two agents negotiate a contract (§17): open, propose, counter, evaluate
	// with confidence 0.97, which decides it by consensus. Every call carries its own
	// sw4rm-idempotency-key and is repeated with it when it gets no answer. Completed:
	// ListNegotiations reports it decided. Failed: aborted. Doubled: more than the two
	// versions recorded (a draft applied twice). Stranded: still open after the drain.
	Negotiations Pattern = "negotiations"
	// Tools: a call of the built-in echo tool (nothing to install) with a unique payload
	// through ToolService.Call; a call with no answer is asked again with the same call_id,
	// which joins it. Completed: the final frame is ok and echoes the payload. Doubled: asked
	// again after it completed, the call_id was run anew (its summary names another attempt)
	// instead of being answered from the record. Failed: the call ended with a tool error.
	Tools Pattern = "tools"
	// HITL: an agent raises a SECURITY_APPROVAL invocation with HitlService.Decide and a
	// sw4rm-idempotency-key, and waits; an operator approves it through
	// HitlAdminService.Decide with Config.OperatorToken. Both sides retry with the same key or
	// the same decision. Completed: the waiting agent received the approval. Failed: it
	// received another outcome (a fallback). Doubled: one idempotency key named two
	// invocations. Stranded: still pending after the drain.
	HITL Pattern = "hitl"
)

// AllPatterns lists every pattern, in report order.
var AllPatterns = []Pattern{Messages, Tasks, DAG, Handoffs, Negotiations, Tools, HITL}

// PatternConfig is one pattern's load.
type PatternConfig struct {
	// Rate is how many operations start per second; zero takes the pattern's default.
	Rate float64
	// Concurrency bounds the operations in flight; zero takes the pattern's default.
	Concurrency int
}

// DefaultPatternConfig is each pattern's default load, sized for a 2-core machine that also
// runs the server, the worker, Temporal and PostgreSQL.
var DefaultPatternConfig = map[Pattern]PatternConfig{
	Messages:     {Rate: 20, Concurrency: 16},
	Tasks:        {Rate: 1, Concurrency: 2},
	DAG:          {Rate: 0.5, Concurrency: 2},
	Handoffs:     {Rate: 1, Concurrency: 2},
	Negotiations: {Rate: 0.5, Concurrency: 2},
	Tools:        {Rate: 5, Concurrency: 4},
	HITL:         {Rate: 0.5, Concurrency: 2},
}

// Config is what Run does.
type Config struct {
	// Addr is the sw4rm server's gRPC address, host:port. Required.
	Addr string
	// DialOptions are added to every connection the agents make (sdk.Dial): TLS, a signing
	// key (sdk.WithSigningKey), an HTTP/1.1 transport. Without them sdk.Dial's environment
	// applies (SW4RM_TLS_*, SW4RM_AGENT_KEY_FILE). The server is expected to run with
	// SW4RM_AUTH=optional or off, so that the generated agents may register unsigned.
	DialOptions []grpc.DialOption
	// Duration is the load phase; zero means one minute.
	Duration time.Duration
	// Drain bounds the wait, after the load phase, for the operations started to finish;
	// zero means one minute.
	Drain time.Duration
	// Interval is how often a Report is made during the run; zero means one minute.
	Interval time.Duration
	// Patterns are the patterns to run and their load; nil runs every pattern at its
	// default. A zero PatternConfig takes the defaults.
	Patterns map[Pattern]PatternConfig
	// OpTimeout bounds one operation from its start, retries and the wait for completion
	// included; zero means two minutes. Operations still going when it runs out are
	// stranded or lost, never counted twice.
	OpTimeout time.Duration
	// Fan is the DAG pattern's fan-out (the nodes between root and join); zero means 3.
	Fan int
	// TaskAgents and NodeAgents are how many agents serve the tasks and the DAG nodes;
	// zero means 2 each.
	TaskAgents, NodeAgents int
	// MetricsURLs are /metrics endpoints of sw4rm processes (or the Temporal server's
	// Prometheus endpoint), each a URL or name=URL, to scrape each interval
	// (go_goroutines, go_memstats_heap_inuse_bytes, process_resident_memory_bytes).
	MetricsURLs []string
	// DatabaseURL is the sw4rm PostgreSQL store, to report its tables' growth; optional.
	DatabaseURL string
	// TemporalDatabaseURL is the PostgreSQL database of Temporal's persistence, to report
	// the growth of its history tables (history_node, history_tree, executions); optional.
	TemporalDatabaseURL string
	// HeartbeatEvery is how often each agent sends its heartbeat (§14); zero means
	// DefaultHeartbeatEvery. It must be well under the server's SW4RM_HEARTBEAT_INTERVAL.
	HeartbeatEvery time.Duration
	// OperatorToken is a HITL operator's token (SW4RM_HITL_OPERATORS name=token) that
	// decides the HITL pattern's invocations; without it the HITL pattern does not run.
	OperatorToken string
	// AgentPrefix starts the id of every agent Run registers; empty makes a fresh
	// "loadgen-<random>", so that runs do not share agents.
	AgentPrefix string
	// OnReport, when set, is called with every Report, the final one included, on Run's
	// goroutine; it must not block for long.
	OnReport func(Report)
	// Logf, when set, receives diagnostics (setup retries, reconnects); nil discards.
	Logf func(format string, args ...any)
}

// withDefaults returns c with its zero fields filled in, or an error naming a bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		return c, fmt.Errorf("loadgen: the server's address is required")
	}
	if c.Duration <= 0 {
		c.Duration = time.Minute
	}
	if c.Drain <= 0 {
		c.Drain = time.Minute
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.HeartbeatEvery <= 0 {
		c.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Minute
	}
	if c.Fan <= 0 {
		c.Fan = 3
	}
	if c.TaskAgents <= 0 {
		c.TaskAgents = 2
	}
	if c.NodeAgents <= 0 {
		c.NodeAgents = 2
	}
	pats := map[Pattern]PatternConfig{}
	if c.Patterns == nil {
		for _, p := range AllPatterns {
			pats[p] = DefaultPatternConfig[p]
		}
	}
	for p, pc := range c.Patterns {
		def, ok := DefaultPatternConfig[p]
		if !ok {
			return c, fmt.Errorf("loadgen: unknown pattern %q (patterns: %s)", p, patternNames())
		}
		if pc.Rate < 0 || pc.Concurrency < 0 {
			return c, fmt.Errorf("loadgen: pattern %s: rate and concurrency must not be negative", p)
		}
		if pc.Rate == 0 {
			pc.Rate = def.Rate
		}
		if pc.Concurrency == 0 {
			pc.Concurrency = def.Concurrency
		}
		pats[p] = pc
	}
	if _, ok := pats[HITL]; ok && c.OperatorToken == "" {
		if c.Patterns != nil {
			return c, fmt.Errorf("loadgen: the hitl pattern needs an operator token (SW4RM_HITL_OPERATORS name=token)")
		}
		delete(pats, HITL)
	}
	c.Patterns = pats
	if c.AgentPrefix == "" {
		c.AgentPrefix = "loadgen-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	}
	return c, nil
}

func patternNames() string {
	s := make([]string, len(AllPatterns))
	for i, p := range AllPatterns {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

// ParsePatterns reads a pattern list as the command line gives it: comma-separated names,
// each optionally with its load, name[=rate[/concurrency]], e.g.
// "messages=50/32,tasks,dag=0.2"; "all" is every pattern at its default.
func ParsePatterns(s string) (map[Pattern]PatternConfig, error) {
	out := map[Pattern]PatternConfig{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, load, hasLoad := strings.Cut(item, "=")
		if name == "all" && !hasLoad {
			for _, p := range AllPatterns {
				out[p] = PatternConfig{}
			}
			continue
		}
		p := Pattern(name)
		if _, ok := DefaultPatternConfig[p]; !ok {
			return nil, fmt.Errorf("unknown pattern %q (patterns: %s, or all)", name, patternNames())
		}
		var pc PatternConfig
		if hasLoad {
			rate, conc, hasConc := strings.Cut(load, "/")
			r, err := strconv.ParseFloat(rate, 64)
			if err != nil || r < 0 {
				return nil, fmt.Errorf("pattern %s: rate %q is not a non-negative number", name, rate)
			}
			pc.Rate = r
			if hasConc {
				n, err := strconv.Atoi(conc)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("pattern %s: concurrency %q is not a non-negative integer", name, conc)
				}
				pc.Concurrency = n
			}
		}
		out[p] = pc
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pattern named (patterns: %s, or all)", patternNames())
	}
	return out, nil
}

// sortedPatterns returns the configured patterns in report order.
func sortedPatterns(m map[Pattern]PatternConfig) []Pattern {
	var out []Pattern
	for _, p := range AllPatterns {
		if _, ok := m[p]; ok {
			out = append(out, p)
		}
	}
	return slices.Clip(out)
}
