package sdk

// The agent side of the scheduler's CONTROL conversation (§7 preemption, §8.4 shutdown, §14
// heartbeats, App. D C.4 and C.5): Serve receives RUN, PREEMPT_REQUEST, TERMINATE, KILL and
// SHUTDOWN from the scheduler, runs one task at a time through a TaskHandler, and answers
// every CONTROL message with the ACKs the scheduler waits for.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ErrPreempted is what a task handler returns (wrapped or not) when it stopped at a safe point
// because the scheduler asked it to yield; SafePoint returns an error wrapping it.
var ErrPreempted = errors.New("sw4rm: task preempted at a safe point")

// Notes of the FULFILLED ACKs Serve sends for the scheduler's CONTROL messages.
const (
	noteYielded    = "yielded"
	noteCompleted  = "completed"
	noteNotRunning = "not running"
	noteTerminated = "terminated"
	noteKilled     = "killed"
)

// endTimeout bounds the sending of NON_PREEMPTIBLE_END, which must go out even when the
// section's ctx is already cancelled.
const endTimeout = 10 * time.Second

// seenLimit is how many scheduler CONTROL message_ids Serve remembers to drop redeliveries.
const seenLimit = 1024

// Task is one unit of work the scheduler dispatched with CONTROL RUN.
type Task struct {
	// ID is the task_id.
	ID string
	// Priority is the task's priority, -19 (highest) .. 20 (lowest) (§7.1).
	Priority int32
	// Params are the task's parameters as submitted.
	Params []byte
	// ContentType is the MIME type of Params.
	ContentType string
	// Scope is the task's scope metadata (§9.2).
	Scope string
	// Resumed reports that this RUN resumes a task the agent yielded earlier (§7.2); the
	// handler restores whatever state it saved when it yielded.
	Resumed bool
}

// TaskRun is one execution of a task by a TaskHandler: it exposes the task, tells the handler
// whether the scheduler asked it to yield, and declares non-preemptible sections. Its methods
// are safe to call from any goroutine.
type TaskRun struct {
	agent *Agent
	task  Task
	// ctx is the task's context: cancelled by TERMINATE, KILL, the end of a shutdown's grace
	// period, or the cancellation of Serve's ctx.
	ctx context.Context

	mu            sync.Mutex
	preempt       bool   // a PREEMPT_REQUEST for this run arrived
	preemptReason string // its reason, for the error SafePoint returns
	npDepth       int    // how many NonPreemptible calls are in progress
}

// Task returns the task being run.
func (r *TaskRun) Task() Task { return r.task }

// PreemptPending reports whether a PREEMPT_REQUEST for this task arrived and was not yet
// honoured, that is, the run has not returned since.
func (r *TaskRun) PreemptPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.preempt
}

// SafePoint is where a handler offers to yield (§7.2): it returns nil to carry on, an error
// wrapping ErrPreempted when a preemption is pending and the run is not inside NonPreemptible
// (the handler should save its state and return that error), or the ctx error when the run
// was terminated.
func (r *TaskRun) SafePoint() error {
	// Termination is forced preemption: it wins over a cooperative request and over a
	// non-preemptible section, whose bound the scheduler has already enforced by then.
	if r.ctx != nil {
		if err := r.ctx.Err(); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.preempt && r.npDepth == 0 {
		if r.preemptReason != "" {
			return fmt.Errorf("%w: task %s: %s", ErrPreempted, r.task.ID, r.preemptReason)
		}
		return fmt.Errorf("%w: task %s", ErrPreempted, r.task.ID)
	}
	return nil
}

// NonPreemptible runs fn as a non-preemptible section of at most maxDuration (§7.2): it
// declares the section to the scheduler with CONTROL NON_PREEMPTIBLE_BEGIN, runs fn with ctx,
// and closes it with NON_PREEMPTIBLE_END, which is sent even when fn fails or panics (the
// panic propagates afterwards). While inside, SafePoint does not report a pending preemption.
// maxDuration is mandatory: it must be positive and at most protocol.MaxNonPreemptible. A
// call nested in another section runs fn inside the outer one without a new declaration;
// sections are meant to nest, not to overlap from concurrent goroutines of one run.
// When the BEGIN cannot be sent, fn does not run and the error is returned.
func (r *TaskRun) NonPreemptible(ctx context.Context, maxDuration time.Duration, fn func(ctx context.Context) error) (err error) {
	if maxDuration <= 0 {
		return fmt.Errorf("sw4rm: a non-preemptible section needs a positive maximum duration (§7.2), got %s", maxDuration)
	}
	if maxDuration > protocol.MaxNonPreemptible {
		return fmt.Errorf("sw4rm: a non-preemptible section may last at most %s, got %s", protocol.MaxNonPreemptible, maxDuration)
	}
	if fn == nil {
		return errors.New("sw4rm: NonPreemptible needs a function to run")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	r.npDepth++
	outer := r.npDepth == 1
	r.mu.Unlock()
	leave := func() {
		r.mu.Lock()
		r.npDepth--
		r.mu.Unlock()
	}
	if !outer {
		// The scheduler tracks one section per task: a nested BEGIN/END pair would close the
		// outer section early on its side, so the outer declaration covers the inner call.
		defer leave()
		return fn(ctx)
	}
	// Round up so that a sub-millisecond bound does not become the invalid max_duration_ms 0.
	ms := int64((maxDuration + time.Millisecond - 1) / time.Millisecond)
	if err := r.sendSection(ctx, protocol.ControlNonPreemptibleBegin, ms); err != nil {
		leave()
		return fmt.Errorf("sw4rm: declare non-preemptible section: %w", err)
	}
	defer func() {
		leave()
		// fn's ctx may be cancelled (the task terminated): the END must go out regardless,
		// or the scheduler would consider the section open until its bound.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		defer cancel()
		if endErr := r.sendSection(endCtx, protocol.ControlNonPreemptibleEnd, 0); endErr != nil {
			// During a panic this assignment is discarded and the panic goes on unwinding.
			err = errors.Join(err, fmt.Errorf("sw4rm: close non-preemptible section: %w", endErr))
		}
	}()
	return fn(ctx)
}

// sendSection sends a NON_PREEMPTIBLE_BEGIN or _END for the run's task to the scheduler.
func (r *TaskRun) sendSection(ctx context.Context, typ string, maxDurationMS int64) error {
	env, err := protocol.NewControlEnvelope(uuid.NewString(), r.agent.id,
		protocol.Control{Type: typ, TaskID: r.task.ID, MaxDurationMS: maxDurationMS})
	if err != nil {
		return err
	}
	// Like Send: sequence_number is monotonic per producer (§11).
	env.SequenceNumber = r.agent.seq.Add(1)
	return r.agent.SendEnvelope(ctx, env, protocol.SchedulerID)
}

// markPreempt records a PREEMPT_REQUEST for the run.
func (r *TaskRun) markPreempt(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.preempt = true
	r.preemptReason = reason
}

// TaskHandler runs one task. It returns the result (sent as the note of the RUN's FULFILLED
// ACK) or an error: one wrapping ErrPreempted when it yielded at a safe point, a
// *RejectedError or *protocol.Error to report a specific error_code, anything else to fail
// the task with INTERNAL_ERROR. A task that fails on its own terms — a check that found a
// problem, input it cannot use — says so with a code, e.g. protocol.Errorf(
// commonpb.ErrorCode_VALIDATION_ERROR, "1 finding: …"), so that its failure does not read as
// the agent's bug; the FAILED ACK's note is the error's message without the code. It must
// return soon after ctx is cancelled.
type TaskHandler func(ctx context.Context, run *TaskRun) ([]byte, error)

// ServeOptions tunes Serve; the zero value (or nil) is fine.
type ServeOptions struct {
	// OnMessage receives every delivery that is not scheduler CONTROL/HEARTBEAT (after
	// Confirm); nil ignores them. It is called on Serve's receive loop, so it must not block
	// for long: preemption requests wait behind it. A delivery whose confirmation was lost,
	// for example because the server went away, comes again on the reopened stream.
	OnMessage func(ctx context.Context, d *Delivery)
	// Logf, when set, receives diagnostics (ACK send failures and retries, stream
	// reconnects); it may be called from several goroutines. nil discards.
	Logf func(format string, args ...any)
	// RetryBackoff is the first wait before Serve reopens a broken stream or sends again an
	// ACK that failed transiently; the wait doubles with every failure in a row up to
	// RetryMaxBackoff, plus up to a fifth of it at random. Zero means DefaultRetryBackoff.
	RetryBackoff time.Duration
	// RetryMaxBackoff caps the wait between attempts. Zero means DefaultRetryMaxBackoff.
	RetryMaxBackoff time.Duration
	// MaxOutage, when positive, is how long Serve keeps trying to reopen its stream, or to
	// deliver one ACK, while every attempt fails transiently: after that Serve gives up and
	// returns the last error, cancelling the running task. Zero means until ctx ends.
	MaxOutage time.Duration
}

// Defaults of ServeOptions' retry fields.
const (
	// DefaultRetryBackoff is the first wait before a retry.
	DefaultRetryBackoff = 100 * time.Millisecond
	// DefaultRetryMaxBackoff caps the wait between retries.
	DefaultRetryMaxBackoff = time.Second
)

// sendAttemptTimeout bounds one attempt to send an ACK, so that a call stuck on a connection
// that went silent is abandoned and sent again instead of holding Serve forever.
const sendAttemptTimeout = 10 * time.Second

// Serve runs the agent's task runtime until the scheduler shuts the agent down: it opens the
// inbound stream, confirms every delivery, answers the scheduler's HEARTBEATs, runs the tasks
// of CONTROL RUN one at a time with h (each in its own goroutine, with a ctx derived from
// ctx), and answers RUN, PREEMPT_REQUEST, TERMINATE, KILL and SHUTDOWN with the ACKs of §7,
// §8.4 and App. D C.4/C.5.
//
// Serve rides out server restarts and network failures: when the stream breaks with a
// transient error (Unavailable, a transport reset, the server closing it) Serve opens it again
// with a backoff (ServeOptions.RetryBackoff) while the running task goes on; the new stream
// redelivers what was not confirmed, and CONTROL messages seen already are dropped. An ACK that
// fails transiently is sent again with the same message_id until it is delivered: the server
// answers a repeated message_id with the message's recorded state, so nothing is applied twice
// and a task's result is not lost while the server is away.
//
// It returns nil after a SHUTDOWN (once the running task finished or its grace period ran
// out, the SHUTDOWN was acknowledged and the agent deregistered), ctx.Err() when ctx is
// cancelled, or the stream's error when it is permanent (the agent is not registered, the
// call is refused) or the server stayed away longer than ServeOptions.MaxOutage. Before
// returning it cancels the running task's ctx and waits for h to return; a task abandoned by
// KILL is not waited for. When Serve returns because of ctx or the stream, the interrupted
// task is not acknowledged.
func (a *Agent) Serve(ctx context.Context, h TaskHandler, opts *ServeOptions) error {
	if h == nil {
		return errors.New("sw4rm: Serve needs a TaskHandler")
	}
	s := &server{agent: a, ctx: ctx, h: h, seen: map[string]struct{}{},
		backoff: backoffPolicy{first: DefaultRetryBackoff, max: DefaultRetryMaxBackoff}}
	if opts != nil {
		s.onMessage, s.logf = opts.OnMessage, opts.Logf
		if opts.RetryBackoff > 0 {
			s.backoff.first = opts.RetryBackoff
		}
		if opts.RetryMaxBackoff > 0 {
			s.backoff.max = opts.RetryMaxBackoff
		}
		s.backoff.first = min(s.backoff.first, s.backoff.max)
		s.backoff.budget = max(opts.MaxOutage, 0)
	}
	// The reader's streams live in rctx, which Serve cancels when it returns: that ends a
	// Recv in progress and with it the reader.
	rctx, cancel := context.WithCancel(ctx)
	recv := make(chan received)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.read(rctx, recv)
	}()
	defer func() {
		cancel()
		<-readerDone
	}()
	return s.loop(recv)
}

// read feeds the loop the deliveries of the agent's inbound stream, opening the stream again
// after every transient failure, until ctx ends or a failure is permanent (or outlasts the
// retry budget), which it reports to the loop as the last thing it sends.
func (s *server) read(ctx context.Context, recv chan<- received) {
	var (
		b      = s.backoff.start()
		stream *Stream
	)
	defer func() {
		if stream != nil {
			stream.Close()
		}
	}()
	for {
		var err error
		opened := time.Now()
		delivered := false
		if stream, err = s.agent.Receive(ctx); err == nil {
			for {
				var d *Delivery
				if d, err = stream.Next(); err != nil {
					break
				}
				if !delivered && b.failures > 0 {
					s.log("sw4rm: inbound stream reopened after %d failed attempts", b.failures)
				}
				delivered = true
				b.reset()
				select {
				case recv <- received{d: d}:
				case <-ctx.Done():
					return
				}
			}
			stream.Close()
			stream = nil
		}
		if ctx.Err() != nil {
			return // Serve is returning: the loop knows why
		}
		if delivered || time.Since(opened) >= s.backoff.max {
			// The stream worked for a while: this is a new outage, not the same one going on.
			b.reset()
		}
		wait, retry := b.fail(transient(ctx, err))
		if !retry {
			select {
			case recv <- received{err: err}:
			case <-ctx.Done():
			}
			return
		}
		if b.failures == 1 || b.failures%10 == 0 {
			s.log("sw4rm: inbound stream failed (attempt %d): %v; reopening in %s", b.failures, err, wait.Round(time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return
		}
	}
}

// transient reports whether err, from a call made with ctx, may succeed when tried again: the
// server went away or was briefly unable to serve, the connection broke, or the server closed
// the stream. An error caused by ctx itself, a refusal (the agent is unknown, the call is not
// allowed or malformed) and a protocol rejection are permanent.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true // the server ended the stream, or the connection dropped mid-message
	}
	var re *RejectedError
	if errors.As(err, &re) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Aborted, codes.ResourceExhausted, codes.Unknown, codes.Internal,
		// Canceled and DeadlineExceeded not caused by ctx: a reset stream, a timed-out attempt.
		codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}

// backoffPolicy is how Serve paces its retries (see ServeOptions).
type backoffPolicy struct {
	first, max time.Duration
	budget     time.Duration // 0: retry until ctx ends
}

// start begins a series of attempts.
func (p backoffPolicy) start() *backoff { return &backoff{policy: p} }

// backoff is one series of attempts that fail in a row.
type backoff struct {
	policy   backoffPolicy
	failures int
	since    time.Time     // the first failure of the series
	delay    time.Duration // the last wait, before jitter
}

// fail records a failed attempt and returns how long to wait before the next one, or false
// when the error is not worth retrying or the series outlasted the budget.
func (b *backoff) fail(worthRetrying bool) (time.Duration, bool) {
	if !worthRetrying {
		return 0, false
	}
	now := time.Now()
	if b.failures == 0 {
		b.since, b.delay = now, b.policy.first
	} else {
		b.delay = min(2*b.delay, b.policy.max)
	}
	b.failures++
	if b.policy.budget > 0 && now.Sub(b.since) >= b.policy.budget {
		return 0, false
	}
	// Jitter keeps the agents of one server from all coming back in the same instant.
	return b.delay + rand.N(b.delay/5+1), true
}

// reset starts a new series.
func (b *backoff) reset() { b.failures = 0 }

// received is one result of Stream.Next.
type received struct {
	d   *Delivery
	err error
}

// result is what a task's goroutine reports when the handler returns.
type result struct {
	out []byte
	err error
}

// activeRun is the loop's record of the task being run; only the loop touches it.
type activeRun struct {
	run    *TaskRun
	runMsg *Delivery // the RUN
	cancel context.CancelCauseFunc
	// done receives the handler's result; buffered so that an abandoned (killed) task's
	// goroutine can deliver it and exit although nobody reads it.
	done chan result

	preempts     []*Delivery // PREEMPT_REQUESTs not yet answered
	terminates   []*Delivery // TERMINATEs not yet answered
	graceTimer   *time.Timer // TERMINATE's grace period
	graceExpired bool        // the handler missed the TERMINATE's grace period
	shutdownStop bool        // the shutdown's grace period ran out and cancelled the task
}

// shutdown is a SHUTDOWN in progress.
type shutdown struct {
	msgs  []*Delivery
	timer *time.Timer // the grace period left to the running task
}

// server is the state of one Serve call, owned by its loop goroutine.
type server struct {
	agent     *Agent
	ctx       context.Context
	h         TaskHandler
	onMessage func(ctx context.Context, d *Delivery)
	logf      func(format string, args ...any)
	backoff   backoffPolicy

	cur  *activeRun
	shut *shutdown

	// seen remembers the scheduler's recent CONTROL message_ids: a delivery whose
	// confirmation was lost comes again, and running a RUN twice (or rejecting the second
	// copy, which would NACK the message being run) would be wrong.
	seen      map[string]struct{}
	seenOrder []string
}

// The causes (context.Cause) of a task ctx cancelled by the scheduler's TERMINATE, KILL or
// SHUTDOWN.
var (
	errTerminated   = errors.New("sw4rm: task terminated by the scheduler")
	errKilled       = errors.New("sw4rm: task killed by the scheduler")
	errShuttingDown = errors.New("sw4rm: agent shutting down")
)

func (s *server) log(format string, args ...any) {
	if s.logf != nil {
		s.logf(format, args...)
	}
}

// loop is Serve's event loop: deliveries, task completions and timers.
func (s *server) loop(recv <-chan received) error {
	for {
		var done <-chan result
		var graceC, shutC <-chan time.Time
		if s.cur != nil {
			done = s.cur.done
			if s.cur.graceTimer != nil && !s.cur.graceExpired {
				graceC = s.cur.graceTimer.C
			}
		}
		if s.shut != nil && s.shut.timer != nil {
			shutC = s.shut.timer.C
		}
		select {
		case <-s.ctx.Done():
			return s.abort(s.ctx.Err())
		case r := <-recv:
			if r.err != nil {
				// A permanent failure, or one that outlasted MaxOutage: transient ones the
				// reader rides out by reopening the stream.
				if err := s.ctx.Err(); err != nil {
					return s.abort(err) // the stream failed because ctx was cancelled
				}
				return s.abort(fmt.Errorf("sw4rm: inbound stream: %w", r.err))
			}
			s.handle(r.d)
		case res := <-done:
			s.finish(res)
		case <-graceC:
			// C.5: the task missed its grace period, so the TERMINATE stays unanswered and
			// the scheduler follows up with KILL.
			s.cur.graceExpired = true
			s.log("sw4rm: task %s did not stop within the TERMINATE grace period", s.cur.run.task.ID)
		case <-shutC:
			s.shut.timer = nil
			if s.cur != nil {
				s.cur.shutdownStop = true
				s.cur.cancel(errShuttingDown)
			}
		}
		if s.shut != nil && s.cur == nil {
			return s.completeShutdown()
		}
	}
}

// abort ends Serve without a SHUTDOWN: it cancels the running task, waits for its handler and
// returns err. Nothing is acknowledged: the agent is going away or lost its stream.
func (s *server) abort(err error) error {
	if s.cur != nil {
		s.cur.cancel(err)
		<-s.cur.done
		s.stopTimers(s.cur)
		s.cur = nil
	}
	if s.shut != nil && s.shut.timer != nil {
		s.shut.timer.Stop()
	}
	return err
}

// completeShutdown acknowledges the SHUTDOWN messages and deregisters the agent (§8.4).
func (s *server) completeShutdown() error {
	for _, d := range s.shut.msgs {
		s.ack(d, commonpb.AckStage_FULFILLED, 0, "")
	}
	if s.shut.timer != nil {
		s.shut.timer.Stop()
	}
	if err := s.agent.Deregister(s.ctx, "shutdown"); err != nil {
		return fmt.Errorf("sw4rm: deregister after SHUTDOWN: %w", err)
	}
	return nil
}

// handle processes one delivery.
func (s *server) handle(d *Delivery) {
	// Confirm first: it moves the scheduler's message to RECEIVED (C.4 "ACK RECEIVED") and
	// frees the buffer slot. A failed confirmation is redelivered later, which seen absorbs.
	if ok, err := d.Confirm(s.ctx); err != nil {
		s.log("sw4rm: confirm delivery %d (%s): %v", d.Seq, d.Envelope.GetMessageId(), err)
	} else if !ok {
		s.log("sw4rm: delivery %d (%s) was not recorded (already confirmed?)", d.Seq, d.Envelope.GetMessageId())
	}
	env := d.Envelope
	if env.GetProducerId() != protocol.SchedulerID {
		s.other(d)
		return
	}
	switch env.GetMessageType() {
	case commonpb.MessageType_HEARTBEAT:
		// Liveness only: the runtime does not know the agent's state, the application does.
		if err := s.agent.Heartbeat(s.ctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil); err != nil {
			s.log("sw4rm: answer HEARTBEAT %s: %v", env.GetMessageId(), err)
		}
	case commonpb.MessageType_CONTROL:
		if s.remember(env.GetMessageId()) {
			s.control(d)
		} else {
			s.log("sw4rm: dropping redelivered CONTROL %s", env.GetMessageId())
		}
	default:
		s.other(d)
	}
}

// other hands a delivery that is not for the runtime to OnMessage.
func (s *server) other(d *Delivery) {
	if s.onMessage != nil {
		s.onMessage(d.Context(s.ctx), d)
	}
}

// remember records a CONTROL message_id and reports whether it is new.
func (s *server) remember(id string) bool {
	if id == "" {
		return true
	}
	if _, ok := s.seen[id]; ok {
		return false
	}
	s.seen[id] = struct{}{}
	s.seenOrder = append(s.seenOrder, id)
	if len(s.seenOrder) > seenLimit {
		delete(s.seen, s.seenOrder[0])
		s.seenOrder = s.seenOrder[1:]
	}
	return true
}

// control processes one of the scheduler's CONTROL messages.
func (s *server) control(d *Delivery) {
	c, perr := protocol.ParseControl(d.Envelope)
	if perr != nil {
		s.ack(d, commonpb.AckStage_REJECTED, protocol.CodeOf(perr), perr.Msg)
		return
	}
	switch c.Type {
	case protocol.ControlRun:
		s.runTask(d, c)
	case protocol.ControlPreemptRequest:
		if r := s.running(c.TaskID); r != nil {
			r.preempts = append(r.preempts, d)
			r.run.markPreempt(c.Reason)
		} else {
			s.ack(d, commonpb.AckStage_FULFILLED, 0, noteNotRunning)
		}
	case protocol.ControlTerminate:
		r := s.running(c.TaskID)
		if r == nil {
			s.ack(d, commonpb.AckStage_FULFILLED, 0, noteNotRunning)
			return
		}
		r.terminates = append(r.terminates, d)
		if r.graceTimer == nil {
			r.cancel(fmt.Errorf("%w: %s", errTerminated, c.Reason))
			r.graceTimer = time.NewTimer(c.Grace())
		}
	case protocol.ControlKill:
		r := s.running(c.TaskID)
		if r == nil {
			s.ack(d, commonpb.AckStage_FULFILLED, 0, noteNotRunning)
			return
		}
		// Abandon the task: its goroutine may run on, but its result lands in the buffered
		// done channel nobody reads, and nothing is ever acknowledged for it.
		r.cancel(errKilled)
		s.stopTimers(r)
		s.cur = nil
		s.ack(d, commonpb.AckStage_FULFILLED, 0, noteKilled)
	case protocol.ControlShutdown:
		if s.shut == nil {
			s.shut = &shutdown{}
			if s.cur != nil {
				if g := c.Grace(); g > 0 {
					s.shut.timer = time.NewTimer(g)
				} else {
					s.cur.shutdownStop = true
					s.cur.cancel(errShuttingDown)
				}
			}
		}
		s.shut.msgs = append(s.shut.msgs, d)
	default:
		// NON_PREEMPTIBLE_BEGIN/END travel from agents to the scheduler, never the other way.
		s.ack(d, commonpb.AckStage_REJECTED, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE,
			fmt.Sprintf("an agent does not accept CONTROL %s", c.Type))
	}
}

// running returns the active run of taskID, or nil.
func (s *server) running(taskID string) *activeRun {
	if s.cur != nil && s.cur.run.task.ID == taskID {
		return s.cur
	}
	return nil
}

// runTask starts the task of a RUN, unless the agent is busy or shutting down.
func (s *server) runTask(d *Delivery, c protocol.Control) {
	if s.shut != nil {
		// §8.4: an agent shutting down accepts no new task.
		s.ack(d, commonpb.AckStage_REJECTED, commonpb.ErrorCode_AGENT_SHUTDOWN, "agent is shutting down")
		return
	}
	if s.cur != nil {
		s.ack(d, commonpb.AckStage_REJECTED, commonpb.ErrorCode_ALREADY_IN_PROGRESS,
			fmt.Sprintf("agent is running task %s", s.cur.run.task.ID))
		return
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	run := &TaskRun{agent: s.agent, ctx: ctx, task: Task{
		ID: c.TaskID, Priority: c.Priority, Params: c.Params, ContentType: c.ParamsContentType,
		Scope: c.Scope, Resumed: c.Resume,
	}}
	ar := &activeRun{run: run, runMsg: d, cancel: cancel, done: make(chan result, 1)}
	s.cur = ar
	h := s.h
	go func() {
		var res result
		defer func() {
			// A panicking handler fails its task instead of taking the agent down.
			if p := recover(); p != nil {
				res = result{err: fmt.Errorf("sw4rm: task handler panicked: %v", p)}
				s.log("sw4rm: task %s handler panicked: %v\n%s", run.task.ID, p, debug.Stack())
			}
			cancel(nil) // release the ctx's resources; a no-op if already cancelled
			ar.done <- res
		}()
		out, err := h(ctx, run)
		res = result{out: out, err: err}
	}()
}

// finish acknowledges the end of the current task.
func (s *server) finish(res result) {
	r := s.cur
	s.cur = nil
	s.stopTimers(r)
	run := r.run
	preemptNote := noteNotRunning
	switch {
	case len(r.terminates) > 0:
		// C.5: terminated within grace → TERMINATE FULFILLED; past grace the TERMINATE stays
		// unanswered. Either way the task ends FAILED forced_preemption (§7.2).
		if !r.graceExpired {
			for _, t := range r.terminates {
				s.ack(t, commonpb.AckStage_FULFILLED, 0, noteTerminated)
			}
		}
		s.ack(r.runMsg, commonpb.AckStage_FAILED, commonpb.ErrorCode_FORCED_PREEMPTION, noteTerminated)
	case len(r.preempts) > 0 && errors.Is(res.err, ErrPreempted):
		// C.4: yielded. The RUN stays open: the scheduler resumes the task with a new RUN.
		preemptNote = noteYielded
	case res.err == nil:
		s.ack(r.runMsg, commonpb.AckStage_FULFILLED, 0, string(res.out))
		preemptNote = noteCompleted
	case r.shutdownStop:
		// §8.4: the task could not finish within the shutdown's grace period.
		s.ack(r.runMsg, commonpb.AckStage_FAILED, commonpb.ErrorCode_AGENT_SHUTDOWN, res.err.Error())
	default:
		code := failureCode(res.err)
		s.ack(r.runMsg, commonpb.AckStage_FAILED, code, failureNote(res.err, code))
	}
	if errors.Is(res.err, ErrPreempted) && len(r.preempts) == 0 {
		s.log("sw4rm: task %s returned ErrPreempted without a pending PREEMPT_REQUEST", run.task.ID)
	}
	for _, p := range r.preempts {
		s.ack(p, commonpb.AckStage_FULFILLED, 0, preemptNote)
	}
}

// failureCode is the error_code of a failed task.
func failureCode(err error) commonpb.ErrorCode {
	if c := CodeOf(err); c != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return c
	}
	// protocol.CodeOf falls back to INTERNAL_ERROR when err carries no *protocol.Error.
	return protocol.CodeOf(err)
}

// failureNote is the reason a failed task's ACK carries: err's message without a leading
// "<error_code>: ", which a *protocol.Error renders, since the ACK carries the code in its
// own field and the scheduler puts it before the reason (a DAG node's error reads
// "… FAILED: validation_error: <reason>", not the code twice).
func failureNote(err error, code commonpb.ErrorCode) string {
	return strings.TrimPrefix(err.Error(), protocol.CodeName(code)+": ")
}

func (s *server) stopTimers(r *activeRun) {
	if r.graceTimer != nil {
		r.graceTimer.Stop()
	}
}

// ack acknowledges d. A transient failure (the server is away, the connection broke) is
// retried with the same message_id until the ACK is delivered, Serve's ctx ends or
// MaxOutage runs out: the server answers a repeated message_id with the state it recorded
// for the first, so a retry never applies an ACK twice (§11.3), and the scheduler, which
// waits for the ACK, learns the task's outcome once the server is back. Other failures are
// logged.
func (s *server) ack(d *Delivery, stage commonpb.AckStage, code commonpb.ErrorCode, note string) {
	env := d.agent.ackEnvelope(d.Envelope, stage, code, note)
	b := s.backoff.start()
	for {
		ctx, cancel := context.WithTimeout(s.ctx, sendAttemptTimeout)
		err := d.agent.SendEnvelope(ctx, env, "")
		cancel()
		if err == nil {
			if b.failures > 0 {
				s.log("sw4rm: ACK %s %s delivered after %d failed attempts", stage, d.Envelope.GetMessageId(), b.failures)
			}
			return
		}
		wait, retry := b.fail(transient(s.ctx, err))
		if !retry {
			s.log("sw4rm: ACK %s %s: %v", stage, d.Envelope.GetMessageId(), err)
			return
		}
		if b.failures == 1 || b.failures%10 == 0 {
			s.log("sw4rm: ACK %s %s failed (attempt %d): %v; sending again in %s", stage, d.Envelope.GetMessageId(),
				b.failures, err, wait.Round(time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-s.ctx.Done():
			timer.Stop()
			s.log("sw4rm: ACK %s %s abandoned: %v", stage, d.Envelope.GetMessageId(), s.ctx.Err())
			return
		}
	}
}
