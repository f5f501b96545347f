package faults

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/procfs"
	"go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	sw4rmtools "github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestToolWorkerKilledDuringNonIdempotentCall: one `sw4rm server` and two `sw4rm worker`s
// share PostgreSQL, Temporal and a git repository. An agent bound to a worktree calls the
// built-in process.run — not idempotent — with a script that appends a line to runs.log,
// prints "started" and sleeps. When the first frame arrives, the worker running the attempt
// (named by the attempt's worker identity, and checked to be the parent of the process) is
// killed with SIGKILL. Once the heartbeat timeout notices, the call ends INTERRUPTED and is
// never run again (§18.3): the stream ends with a final frame whose summary says so, a Call
// for the same call_id answers ABORTED with error code INTERRUPTED, and runs.log holds one
// line, also a few seconds later.
//
// SIGKILL gives the worker no chance to kill the process group it started; the script runs
// under sw4rm as the init of its own PID namespace, which dies with the worker (Pdeathsig)
// and takes the script's `sleep` with it: nothing the call started is left running.
func TestToolWorkerKilledDuringNonIdempotentCall(t *testing.T) {
	tf := startToolFault(t)
	ctx, cancel := context.WithTimeout(tf.ctx, time.Minute)
	defer cancel()

	callID := "fault-run-" + uuid.NewString()[:8]
	call := &toolpb.ToolCall{CallId: callID, ProviderId: sw4rmtools.BuiltinProviderID, ToolName: "process.run",
		Args:   []byte(`{"argv":["sh","-c","echo run >> runs.log; echo started; sleep 60"]}`),
		Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}}
	st, err := tf.tc.CallStream(ctx, call)
	if err != nil {
		t.Fatalf("CallStream: %v", err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatalf("the first frame: %v", err)
	}
	f := figures{scenario: "tool-worker-kill-non-idempotent", accepted: 1}
	if string(first.GetData()) != "started\n" || first.GetFinal() {
		f.problem("the first frame is %q (final=%v), not the script's \"started\"", first.GetData(), first.GetFinal())
	}
	victim, attempt := tf.attemptWorker(ctx, t, callID)
	if attempt != 1 {
		f.problem("the running attempt is %d, not the first", attempt)
	}
	// The identity names the worker; the process tree must agree, or the kill misses the call.
	if parent := tf.processParent(t); parent != victim {
		f.problem("the process in the worktree is a child of %s, but the attempt's identity names %s", nameOf(parent), victim.name)
	}
	victim.kill()
	killedAt := time.Now()

	rest, err := recvAll(st)
	endedAfter := time.Since(killedAt)
	switch {
	case err != nil:
		f.problem("the stream did not end with a final frame after the kill: %v (after %d more frames)", err, len(rest))
	case len(rest) == 0:
		f.problem("the stream ended without a final frame")
	default:
		sum := summary(t, rest[len(rest)-1])
		if sum.Status != "error" || sum.ErrorCode != string(tool.CodeInterrupted) {
			f.problem("the final frame's summary is %+v, want status error and error_code INTERRUPTED", sum)
		}
		if !sum.Partial || sum.Frames == 0 {
			f.problem("the final frame's summary does not count the partial results before it: %+v", sum)
		}
	}

	var trailer metadata.MD
	_, err = tf.tc.Call(ctx, call, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Aborted || !equal(trailer.Get(wire.ToolErrorCodeTrailer), string(tool.CodeInterrupted)) {
		f.problem("Call for the ended call answers %v with %s %v, want ABORTED and INTERRUPTED", err, wire.ToolErrorCodeTrailer,
			trailer.Get(wire.ToolErrorCodeTrailer))
	}

	runs := tf.runs(t)
	// A second run would come after a retry's backoff (a second at least): look again.
	time.Sleep(3 * time.Second)
	runsLater := tf.runs(t)
	if runs != 1 || runsLater != 1 {
		f.problem("runs.log has %d lines at the end of the call and %d a few seconds later, want 1", runs, runsLater)
	}
	if runsLater > 1 {
		f.duplicated = runsLater - 1
	}
	strays := tf.killLeftovers()
	if strays > 0 {
		f.problem("%d processes the call started outlived the killed worker", strays)
	}
	f.add("killed=%s interrupted_after_s=%.1f runs=%d leftover_processes=%d", victim.name, endedAfter.Seconds(), runsLater, strays)
	f.report(t)
}

// TestToolWorkerKilledDuringIdempotentCall: the same set-up; the built-in sleep — idempotent
// — runs for 8 s with max_retries 2. When the first frame arrives, the worker running the
// attempt is killed with SIGKILL. Temporal notices the lost heartbeat and tries again on the
// worker that is left, and the call completes: the stream ends with a final frame whose
// summary is ok with an attempt after the first, which ran on the surviving worker.
func TestToolWorkerKilledDuringIdempotentCall(t *testing.T) {
	tf := startToolFault(t)
	ctx, cancel := context.WithTimeout(tf.ctx, time.Minute)
	defer cancel()

	callID := "fault-sleep-" + uuid.NewString()[:8]
	call := &toolpb.ToolCall{CallId: callID, ProviderId: sw4rmtools.BuiltinProviderID, ToolName: "sleep", Args: []byte(`{"ms":8000}`),
		Policy: &toolpb.ExecutionPolicy{MaxRetries: 2}}
	st, err := tf.tc.CallStream(ctx, call)
	if err != nil {
		t.Fatalf("CallStream: %v", err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatalf("the first frame: %v", err)
	}
	f := figures{scenario: "tool-worker-kill-idempotent", accepted: 1}
	if first.GetFinal() {
		f.problem("the first frame is already the final one: %s", first.GetSummary())
	}
	victim, attempt := tf.attemptWorker(ctx, t, callID)
	if attempt != 1 {
		f.problem("the running attempt is %d, not the first", attempt)
	}
	victim.kill()
	killedAt := time.Now()

	rest, err := recvAll(st)
	endedAfter := time.Since(killedAt)
	var sum tool.Summary
	switch {
	case err != nil:
		f.problem("the stream did not end with a final frame after the kill: %v (after %d more frames)", err, len(rest))
	case len(rest) == 0:
		f.problem("the stream ended without a final frame")
	default:
		sum = summary(t, rest[len(rest)-1])
		if sum.Status != "ok" || sum.Attempt < 2 {
			f.problem("the final frame's summary is %+v, want status ok from attempt 2 or later", sum)
		}
	}
	if _, err := tf.tc.Call(ctx, call); err != nil {
		f.problem("Call for the completed call: %v", err)
	}
	finisher := tf.completedBy(ctx, t, callID)
	if finisher == victim {
		f.problem("the completing attempt ran on the killed worker %s", victim.name)
	}
	f.add("killed=%s completed_by=%s attempt=%d completed_after_s=%.1f", victim.name, nameOf(finisher), sum.Attempt, endedAfter.Seconds())
	f.report(t)
}

// toolFault is the set-up of the tool call faults: a server, two workers, and an agent bound
// to its home worktree whose calls name it (authentication is off).
type toolFault struct {
	ts      *temporalServer
	workers []*sw4rmProc
	tc      toolpb.ToolServiceClient
	// ctx carries the agent's id for the frontend.
	ctx context.Context
	// worktree is the bound worktree's directory, symbolic links resolved.
	worktree string
}

func startToolFault(t *testing.T) *toolFault {
	t.Helper()
	repo := faultRepo(t)
	dir := t.TempDir()
	d := startDeployment(t, dir, 2, "SW4RM_REPOS=app="+repo)
	server := d.server
	tf := &toolFault{ts: d.ts, workers: d.workers}
	// "worker polling" is the main task queue; the tool queues start right after it.
	for _, w := range tf.workers {
		marker := "---- " + w.name + " start"
		if err := waitFor(30*time.Second, 50*time.Millisecond, func() bool { return logContains(w.log, marker, "tool worker polling") }); err != nil {
			t.Fatalf("%s does not poll the tool task queue:\n%s", w.name, tail(w.log, 20))
		}
	}

	a := dialAgent(t, server.addr, agentID("coder"))
	register(t, a, "coder")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home, err := wtsdk.New(a).Bind(ctx, "app", "home")
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if tf.worktree, err = filepath.EvalSymlinks(home.Path); err != nil {
		t.Fatalf("worktree %s: %v", home.Path, err)
	}
	// Registered after the processes' own cleanups, so it runs before them: nothing a call
	// started in the worktree outlives the test.
	t.Cleanup(func() { tf.killLeftovers() })
	tf.tc = toolpb.NewToolServiceClient(a.Conn())
	tf.ctx = metadata.AppendToOutgoingContext(context.Background(), wire.AgentIDKey, a.ID())
	return tf
}

// attemptWorker returns the worker running the call's attempt, named by the identity the
// attempt's worker gave when it took the activity task ("<pid>@<host>@", the Go SDK's
// default, which sw4rm keeps), and the attempt's number.
func (tf *toolFault) attemptWorker(ctx context.Context, t *testing.T, callID string) (*sw4rmProc, int32) {
	t.Helper()
	var identity string
	var attempt int32
	err := waitCtx(ctx, 50*time.Millisecond, func() bool {
		d, err := tf.ts.client.DescribeWorkflowExecution(ctx, workflows.ToolWorkflowID(callID), "")
		if err != nil {
			return false
		}
		for _, pa := range d.GetPendingActivities() {
			if pa.GetState() == enums.PENDING_ACTIVITY_STATE_STARTED && pa.GetLastWorkerIdentity() != "" {
				identity, attempt = pa.GetLastWorkerIdentity(), pa.GetAttempt()
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no started attempt of %s: %v", callID, err)
	}
	w := tf.workerOf(identity)
	if w == nil {
		t.Fatalf("no worker has the identity %q of %s's attempt (workers: %s)", identity, callID, workerPIDs(tf.workers))
	}
	return w, attempt
}

// completedBy returns the worker whose attempt completed the call's activity, from the
// activity's started event (written with the last attempt's identity when it closes).
func (tf *toolFault) completedBy(ctx context.Context, t *testing.T, callID string) *sw4rmProc {
	t.Helper()
	it := tf.ts.client.GetWorkflowHistory(ctx, workflows.ToolWorkflowID(callID), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var identity string
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", callID, err)
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			identity = a.GetIdentity()
		}
	}
	return tf.workerOf(identity)
}

// workerOf is the worker whose process id an SDK identity names, or nil.
func (tf *toolFault) workerOf(identity string) *sw4rmProc {
	pid, _, _ := strings.Cut(identity, "@")
	for _, w := range tf.workers {
		if strconv.Itoa(w.proc.cmd.Process.Pid) == pid {
			return w
		}
	}
	return nil
}

// processParent returns the worker that is the parent of a process running in the worktree,
// or nil.
func (tf *toolFault) processParent(t *testing.T) *sw4rmProc {
	t.Helper()
	for _, p := range tf.worktreeProcs(t) {
		s, err := p.Stat()
		if err != nil {
			continue
		}
		for _, w := range tf.workers {
			if s.PPID == w.proc.cmd.Process.Pid {
				return w
			}
		}
	}
	return nil
}

// worktreeProcs are the processes whose working directory is in the worktree: those a
// process.run call started there, and their children.
func (tf *toolFault) worktreeProcs(t testing.TB) []procfs.Proc {
	all, err := procfs.AllProcs()
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var out []procfs.Proc
	for _, p := range all {
		cwd, err := p.Cwd()
		if err != nil {
			continue // gone, or not ours to read
		}
		if cwd == tf.worktree || strings.HasPrefix(cwd, tf.worktree+string(filepath.Separator)) {
			out = append(out, p)
		}
	}
	return out
}

// killLeftovers kills (SIGKILL) every process still running in the worktree — a killed
// worker cannot kill the process group of the call it ran — and returns how many there were.
func (tf *toolFault) killLeftovers() int {
	if tf.worktree == "" {
		return 0
	}
	all, err := procfs.AllProcs()
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range all {
		if cwd, err := p.Cwd(); err == nil && (cwd == tf.worktree || strings.HasPrefix(cwd, tf.worktree+string(filepath.Separator))) {
			if syscall.Kill(p.PID, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// runs counts the lines of runs.log in the worktree: one per run of the script.
func (tf *toolFault) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tf.worktree, "runs.log"))
	if err != nil {
		t.Fatalf("runs.log: %v", err)
	}
	return strings.Count(string(b), "\n")
}

// recvAll reads a stream to its end; the error is nil only when it ended cleanly after a
// final frame.
func recvAll(st grpc.ServerStreamingClient[toolpb.ToolFrame]) ([]*toolpb.ToolFrame, error) {
	var out []*toolpb.ToolFrame
	for {
		f, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if len(out) == 0 || !out[len(out)-1].GetFinal() {
				return out, errors.New("the stream ended before a final frame")
			}
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

// summary decodes a final frame's summary.
func summary(t *testing.T, f *toolpb.ToolFrame) tool.Summary {
	t.Helper()
	var s tool.Summary
	if err := json.Unmarshal(f.GetSummary(), &s); err != nil {
		t.Fatalf("frame %d's summary %q: %v", f.GetFrameNo(), f.GetSummary(), err)
	}
	return s
}

// equal reports whether a metadata value list is exactly [want].
func equal(got []string, want string) bool { return len(got) == 1 && got[0] == want }

// nameOf names a worker, or says there is none.
func nameOf(w *sw4rmProc) string {
	if w == nil {
		return "(none)"
	}
	return w.name
}
