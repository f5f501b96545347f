// Package store defines the persistent state that SW4RM keeps outside Temporal: the routed
// message plane (per-agent inbound buffers and ACK states, §11–§13), the registry projection
// (§14), the audit log (§19) and negotiation artifacts. Two implementations satisfy these
// interfaces — store/memory for `sw4rm dev` and unit tests, store/postgres for production —
// and store/storetest holds the one conformance suite that both must pass.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	pdlq "github.com/sw4rm/sw4rm-temporal/protocol/dlq"
)

// Sentinel errors shared by every implementation; callers match them with errors.Is.
var (
	// ErrNotFound reports that the addressed record does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrBufferFull reports that the recipient's inbound buffer is at capacity (§13).
	ErrBufferFull = errors.New("store: inbound buffer full")
	// ErrDuplicateMessage reports that a message with the same message_id was already admitted.
	ErrDuplicateMessage = errors.New("store: duplicate message_id")
	// ErrAlreadyDecided reports that a HITL invocation was already completed.
	ErrAlreadyDecided = errors.New("store: hitl invocation already decided")
	// ErrInvalidPosition reports a resume offset beyond the last seq ever assigned.
	ErrInvalidPosition = errors.New("store: resume position beyond the stream")
	// ErrDuplicateArtifact reports that an artifact with the same (negotiation_id, kind, version) exists.
	ErrDuplicateArtifact = errors.New("store: duplicate artifact version")
	// ErrUnavailable marks a failure of the store itself — unreachable, restarting, the
	// connection lost — as opposed to a refusal of what was written: the same write may
	// succeed once the store is back. Implementations wrap such errors with it where a
	// caller retries (the audit log's writer does).
	ErrUnavailable = errors.New("store: unavailable")
)

// Store bundles the interfaces that the frontend, the activities and the CLI use.
type Store interface {
	// Messages returns the routed message plane.
	Messages() MessagePlane
	// Registry returns the agent registry projection.
	Registry() Registry
	// Audit returns the audit log.
	Audit() AuditLog
	// Artifacts returns the negotiation artifact store.
	Artifacts() Artifacts
	// HITL returns the human-in-the-loop invocation projection.
	HITL() HITL
	// DLQ returns the dead-letter queue.
	DLQ() DLQ
	// Outbox returns the outbox entries that are not delivered yet.
	Outbox() Outbox
	// ActivityBuffer returns the scheduler's activity buffer (§10).
	ActivityBuffer() ActivityBuffer
	// Keys returns the agents' public keys and the nonces of signed calls (§6.2, §23).
	Keys() Keys
	// Handoffs returns the handoff projection and fences (§17.6).
	Handoffs() Handoffs
	// Definitions returns the versioned DAG workflow definitions (§17.7).
	Definitions() WorkflowDefinitions
	// NegotiationPolicies returns the base negotiation policy and the policy profiles
	// (§17.2).
	NegotiationPolicies() NegotiationPolicies
	// Worktrees returns the worktree binding projection (§16).
	Worktrees() Worktrees
	// ToolProviders returns the tool providers and their descriptors (§18.1).
	ToolProviders() ToolProviders
	// ToolCalls returns the tool calls and their stored frames (§18.2).
	ToolCalls() ToolCalls
	// Kind names the implementation ("memory" or "postgres") for logs.
	Kind() string
	// Close releases connections and stops background work.
	Close()
}

// MessageRecord is the router's durable view of one message attempt (one message_id) and
// where it stands in the lifecycle of §11 and Appendix C.
type MessageRecord struct {
	// MessageID is the envelope's message_id (unique per attempt).
	MessageID string
	// ProducerID is the envelope's producer_id.
	ProducerID string
	// RecipientID is the agent the router resolved as the destination.
	RecipientID string
	// CorrelationID is the envelope's correlation_id.
	CorrelationID string
	// MessageType is the envelope's message_type.
	MessageType commonpb.MessageType
	// State is the current lifecycle state.
	State commonpb.EnvelopeState
	// ErrorCode is set when State is REJECTED, FAILED or TIMED_OUT.
	ErrorCode commonpb.ErrorCode
	// Note is a human-readable explanation of the last transition.
	Note string
	// Envelope is the envelope as admitted (a copy; never mutated by the store).
	Envelope *commonpb.Envelope
	// DedupKey is the idempotency key it was admitted under ("" for none).
	DedupKey string
	// ExpiresAt is when its TTL runs out; zero means never.
	ExpiresAt time.Time
	// CreatedAt is when the message was admitted (or rejected).
	CreatedAt time.Time
	// UpdatedAt is when State last changed.
	UpdatedAt time.Time
}

// AdmitRequest asks the message plane to admit one envelope into a recipient's inbound buffer.
type AdmitRequest struct {
	// Envelope is the envelope to store and deliver; its message_id must be set.
	Envelope *commonpb.Envelope
	// RecipientID is the agent whose buffer receives the envelope.
	RecipientID string
	// Capacity is the buffer limit to enforce: the admission fails with ErrBufferFull when the
	// recipient already holds Capacity unconfirmed rows that were themselves admitted with a
	// capacity (data). Zero means no limit, and the row then neither takes a slot nor counts
	// against a later admission's (§13: the capacity is about data); the router uses that for
	// its own control traffic (ACK forwards, NACKs, registry notifications, the scheduler's
	// CONTROL messages), which must never be dropped and is bounded by what the recipient
	// itself sent or was given to run.
	Capacity int
	// Track creates a MessageRecord in state SENT so the message's lifecycle can be advanced by
	// ACKs. Control traffic that nobody acknowledges (ACK forwards, NACKs) is not tracked.
	Track bool
	// Lane is the communication class lane the row joins (§7.3); unspecified means STANDARD.
	Lane commonpb.CommunicationClass
	// ExpiresAt is when the message's TTL runs out (§11 ttl_ms); zero means never.
	ExpiresAt time.Time
	// Dedup, when set (with Track), makes the admission consult and update the idempotency
	// cache atomically (§11.2); see Dedup.
	Dedup *Dedup
	// Outbox are written to the Outbox in the admission's transaction, leased for
	// OutboxLease, and only when the message is admitted (not when it is refused, rejected
	// or a duplicate): what the message promises Temporal, such as the event it delivers to a
	// DAG run, is kept exactly when the message is.
	Outbox []OutboxEntry
}

// Dedup identifies the logical operation of a tracked message for idempotency (§11.2, §11.3).
// Keys are scoped to the producer, so one agent cannot poison another's cache (§23).
//
// Admission with a Dedup key, in the same transaction as the capacity check and the insert:
//   - no live entry for (ProducerID, Key): admit, and create the entry {in_progress,
//     original = latest = this message_id};
//   - entry in_progress (its latest attempt is not terminal and not TIMED_OUT): record the
//     message REJECTED/ALREADY_IN_PROGRESS (not enqueued) and return a *DedupError with
//     InProgress set;
//   - entry retrying (its latest attempt TIMED_OUT): admit as the next attempt; the entry
//     becomes in_progress with latest = this message_id and Attempts+1;
//   - entry terminal: record the message REJECTED/DUPLICATE_DETECTED (not enqueued) and return
//     a *DedupError carrying the entry (the cached outcome) without re-execution.
//
// ErrBufferFull leaves the cache untouched. An entry is live while its UpdatedAt is within
// Window; an older one is replaced as if absent.
type Dedup struct {
	// ProducerID scopes the key.
	ProducerID string
	// Key is "t:<idempotency_token>", or "s:<sequence_number>:<fingerprint>" when there is
	// no token (protocol.DedupKey).
	Key string
	// Window is the deduplication window (default 3600 s, §11.2, §20).
	Window time.Duration
}

// Idempotency entry statuses.
const (
	// OpInProgress: the latest attempt is being processed.
	OpInProgress = "in_progress"
	// OpRetrying: the latest attempt timed out; the next attempt will be admitted.
	OpRetrying = "retrying"
	// OpTerminal: the operation has an outcome; further attempts get it from the cache.
	OpTerminal = "terminal"
)

// IdempotencyEntry is the cached state of one logical operation (§11.2).
type IdempotencyEntry struct {
	// ProducerID and Key identify the operation.
	ProducerID, Key string
	// Status is OpInProgress, OpRetrying or OpTerminal.
	Status string
	// OriginalMessageID is the first attempt, or, once terminal, the attempt whose outcome is
	// cached (the earliest successful completion, §11.1 rule 4).
	OriginalMessageID string
	// LatestMessageID is the most recent admitted attempt.
	LatestMessageID string
	// Attempts counts admitted attempts.
	Attempts int
	// TerminalState and ErrorCode are the cached outcome once terminal.
	TerminalState commonpb.EnvelopeState
	// ErrorCode accompanies a failed outcome.
	ErrorCode commonpb.ErrorCode
	// Result is the cached result (the completing ACK's note).
	Result string
	// CachedAt is when the outcome was cached.
	CachedAt time.Time
	// CreatedAt and UpdatedAt bound the entry's life in the window.
	CreatedAt, UpdatedAt time.Time
}

// DedupError is returned by Admit when the idempotency cache answers instead of admitting.
type DedupError struct {
	// Entry is the cache entry consulted.
	Entry IdempotencyEntry
	// InProgress distinguishes ALREADY_IN_PROGRESS from DUPLICATE_DETECTED.
	InProgress bool
}

// Error describes the cache decision.
func (e *DedupError) Error() string {
	if e.InProgress {
		return "store: operation already in progress (attempt " + e.Entry.LatestMessageID + ")"
	}
	return "store: duplicate of " + e.Entry.OriginalMessageID
}

// LaneWeights are the weighted-fair shares of the three lanes when Claim interleaves them
// (§7.3); a zero weight counts as 1 so no lane starves.
type LaneWeights struct {
	// Privileged, Standard and Bulk are the relative shares.
	Privileged, Standard, Bulk int
}

// ClaimRequest asks for deliverable rows of one agent.
type ClaimRequest struct {
	// AgentID is the consumer.
	AgentID string
	// Limit caps the rows handed out.
	Limit int
	// Lease is how long claimed rows stay invisible to other claims.
	Lease time.Duration
	// Weights interleave the lanes: within the rows handed out, lanes alternate by weighted
	// round robin (PRIVILEGED first) and each lane keeps seq order. Rows of a lane with
	// nothing deliverable give their turn to the others.
	Weights LaneWeights
}

// ExpiredMessage is a message the sweep moved to a terminal state.
type ExpiredMessage struct {
	// Record is the message after the transition (TIMED_OUT/ACK_TIMEOUT or FAILED/TTL_EXPIRED).
	Record MessageRecord
	// Entry is the idempotency entry after the transition, when the message had a key.
	Entry *IdempotencyEntry
}

// LateAck is what RecordLateAck found and changed (§11.1).
type LateAck struct {
	// Record is the acknowledged message (unchanged: its state is terminal).
	Record MessageRecord
	// Entry is its idempotency entry, nil when the message had no key.
	Entry *IdempotencyEntry
	// Reconciled is true when the late ACK made the entry terminal (rule 4: the earliest
	// successful completion wins).
	Reconciled bool
}

// BufferStat describes one agent's inbound buffer for the back-pressure metrics (§13).
type BufferStat struct {
	// AgentID is the agent.
	AgentID string
	// Depth counts unconfirmed rows.
	Depth int
	// OldestEnqueuedAt is the oldest unconfirmed row's admission time; zero when empty.
	OldestEnqueuedAt time.Time
}

// PendingResponse tracks a request that requires a response (004 §1–§2).
type PendingResponse struct {
	// RequestMessageID is the current attempt of the request.
	RequestMessageID string
	// OriginalMessageID is its first attempt.
	OriginalMessageID string
	// ProducerID waits for the response; ResponderID owes it.
	ProducerID, ResponderID string
	// CorrelationID is the request's correlation_id.
	CorrelationID string
	// Attempt is the 1-based attempt number; MaxAttempts bounds retries.
	Attempt, MaxAttempts int
	// Timeout is the per-attempt response timeout.
	Timeout time.Duration
	// Deadline is when the current attempt times out.
	Deadline time.Time
	// Status is "pending", "fulfilled", or "expired" (claimed by the sweep).
	Status string
	// ResponseMessageID is the response that fulfilled it.
	ResponseMessageID string
}

// Delivery is one row of an agent's inbound buffer as handed to its stream.
type Delivery struct {
	// Seq is the row's position: unique and increasing across the whole store.
	Seq int64
	// AgentID is the recipient.
	AgentID string
	// Envelope is the stored envelope.
	Envelope *commonpb.Envelope
	// EnqueuedAt is when the row was admitted.
	EnqueuedAt time.Time
	// Attempts counts how many times the row has been claimed for delivery.
	Attempts int
	// Lane is the communication class lane the row was admitted to (§7.3).
	Lane commonpb.CommunicationClass
}

// Transition asks for a lifecycle change of one message.
type Transition struct {
	// MessageID names the message.
	MessageID string
	// To is the requested state.
	To commonpb.EnvelopeState
	// ErrorCode accompanies terminal error states.
	ErrorCode commonpb.ErrorCode
	// Note explains the change.
	Note string
}

// LegalFunc decides whether a lifecycle transition is allowed; protocol.MessageTransitionLegal
// is the one the router uses. The store calls it once with the record's current state and
// applies the transition only if that state is still current when it writes, so the check
// and the write are atomic.
type LegalFunc func(from, to commonpb.EnvelopeState) bool

// DeliveryRef names one row of an agent's inbound buffer, as AckDelivery does.
type DeliveryRef struct {
	// AgentID owns the buffer.
	AgentID string
	// Seq is the row's StreamItem.seq.
	Seq int64
	// MessageID, when not empty, must match the row's message_id.
	MessageID string
}

// Step is a lifecycle transition that a caller planned from a message's record (see PlanFunc),
// together with the control traffic that goes with it.
type Step struct {
	// To is the state to move to; a step to the message's current state applies nothing.
	To commonpb.EnvelopeState
	// ErrorCode accompanies terminal error states.
	ErrorCode commonpb.ErrorCode
	// Note explains the change (and, for a completion, is the idempotency cache's result).
	Note string
	// FollowUp, when set, is admitted in the same transaction as the transition and only if
	// the transition applies: the router's ACK forward or RECEIVED ACK to the producer. It is
	// control traffic (Track, Capacity and Dedup must be zero), so it is never refused for a
	// full buffer; a message_id already known fails the whole call with ErrDuplicateMessage
	// and changes nothing.
	FollowUp *AdmitRequest
	// Outbox, when set, is written to the Outbox in the same transaction as the transition
	// and only if it applies, leased for OutboxLease (the caller's in-line attempt): the
	// ACK of a scheduler's CONTROL message, on its way to the agent's lifecycle workflow.
	Outbox *OutboxEntry
}

// PlanFunc decides, from a tracked message's current record, the Step to apply to it, or nil
// for none; an error aborts the call before anything is written. The store calls it outside
// its locks and transactions, so it may read the store (the router looks up the registry in
// it). The step is written only if the message's state is still the one plan saw; when it
// changed meanwhile, plan is called again with the newer record (and so it is when a Known
// record proved out of date). So plan may be called more than once and must have no side
// effects: the caller acts on the result instead.
type PlanFunc func(rec MessageRecord) (*Step, error)

// StepRequest asks AdvanceWith for a planned step.
type StepRequest struct {
	// MessageID names the tracked message.
	MessageID string
	// Plan decides the step.
	Plan PlanFunc
	// Known, when set, is the message's record as the caller last saw it (a StepResult's, or
	// one it built from a delivered envelope); the store may then plan on it instead of
	// reading the record first. It is only a guess: a step planned on it is written only if
	// the message is still tracked and in Known.State, and when it is not, or Plan makes no
	// step of it, the store reads the record and plans again. Decisions and results are
	// those of a call without it; only the read is saved when the guess is right.
	Known *MessageRecord
}

// ConfirmRequest asks ConfirmAndAdvance to confirm a delivery row.
type ConfirmRequest struct {
	// AgentID and Seq name the row.
	AgentID string
	Seq     int64
	// MessageID, when set, must be the row's message_id.
	MessageID string
	// Plan decides the step of a tracked message.
	Plan PlanFunc
	// Known is as in StepRequest, for the row's message; it is used only with MessageID set
	// to Known.MessageID.
	Known *MessageRecord
}

// StepResult is what AdvanceWith, or ConfirmAndAdvance for a tracked message, did.
type StepResult struct {
	// Record is the message's record after the call: after the step when it applied, else as
	// plan last saw it.
	Record MessageRecord
	// Applied reports whether a step was applied.
	Applied bool
	// FollowUpSeq is the delivery seq of the step's follow-up admission; 0 when none.
	FollowUpSeq int64
}

// ConfirmResult is what ConfirmAndAdvance did.
type ConfirmResult struct {
	// Delivery is the confirmed row; Confirmed is false (and nothing changed) when there was
	// no row to confirm, as with Confirm.
	Delivery  Delivery
	Confirmed bool
	// Tracked reports that the row's message is tracked: plan was consulted and StepResult
	// describes the message.
	Tracked bool
	StepResult
}

// MessagePlane is the routed message plane: inbound buffers, delivery confirmation and the
// message lifecycle. Every method is safe for concurrent use by many frontends sharing one
// store.
type MessagePlane interface {
	// Admit stores the envelope and appends it to the recipient's buffer atomically. It
	// returns the new delivery seq. With Capacity > 0 and the buffer full of data (see
	// AdmitRequest.Capacity; Depth counts control rows too) it returns
	// ErrBufferFull and, if Track is set, records the message as REJECTED with BUFFER_FULL so
	// the rejection is visible (§13: never a silent drop). A message_id that was already
	// admitted or recorded returns ErrDuplicateMessage and changes nothing.
	Admit(ctx context.Context, req AdmitRequest) (seq int64, err error)

	// Claim hands out up to req.Limit deliverable rows of req.AgentID and leases them for
	// req.Lease: a row is deliverable when it is unconfirmed and not leased, or its lease
	// expired, and its message's TTL has not run out. Lanes are interleaved by req.Weights;
	// each claimed row's Attempts is incremented. Leases need not survive a crash of the store
	// (store/postgres commits claims without waiting for the disk): a crash may forget the
	// latest claims, whose rows are then deliverable again with Attempts as before them.
	Claim(ctx context.Context, req ClaimRequest) ([]Delivery, error)

	// ReleaseLeases makes every unconfirmed row of agentID deliverable again at once; the
	// router calls it when the agent opens a new stream, so whatever the previous stream got
	// but never confirmed is redelivered.
	ReleaseLeases(ctx context.Context, agentID string) error

	// Confirm marks the row (agentID, seq) as confirmed and removes it from the buffer. When
	// messageID is not empty it must match the row's message_id. It returns the confirmed row
	// and true, or false (and no error) for an unknown seq, an already-confirmed seq, another
	// agent's seq or a mismatched message_id.
	Confirm(ctx context.Context, agentID string, seq int64, messageID string) (Delivery, bool, error)

	// ConfirmBatch confirms, as Confirm does, each listed row that is still unconfirmed and
	// matches its agent (and message_id, when given), skipping the others, and returns how
	// many it confirmed. It is meant for control traffic, whose confirmation the router
	// answers from the stream's own record and writes behind (router.Stream): like Claim's
	// leases, these confirmations need not survive a crash of the store, since a forgotten
	// one only makes its row deliverable again.
	ConfirmBatch(ctx context.Context, rows []DeliveryRef) (int, error)

	// Depth returns how many unconfirmed rows agentID holds, control traffic included.
	Depth(ctx context.Context, agentID string) (int, error)

	// GetMessage returns a tracked message's record, or ErrNotFound.
	GetMessage(ctx context.Context, messageID string) (MessageRecord, error)

	// Advance applies a lifecycle transition if legal(current, t.To) holds. It returns the
	// record after the call and whether the transition was applied; an illegal or no-op
	// transition returns the unchanged record and false. Unknown messages give ErrNotFound.
	Advance(ctx context.Context, t Transition, legal LegalFunc) (MessageRecord, bool, error)

	// AdvanceWith applies to a tracked message the Step that req.Plan makes of its record,
	// with the step's follow-up admission and the idempotency entry's update (as Advance) in
	// one transaction. Unknown messages give ErrNotFound; a nil step, or a step to the current
	// state, applies nothing. See PlanFunc for when Plan is called.
	AdvanceWith(ctx context.Context, req StepRequest) (StepResult, error)

	// ConfirmAndAdvance is Confirm and AdvanceWith in one transaction: it confirms the row
	// (AgentID, Seq) and, when the row's message is tracked, applies the Step that Plan makes
	// of the message's record, with its follow-up admission. The confirmation, the transition
	// and the follow-up are written together or not at all, and only while the message's state
	// is still the one Plan saw (see PlanFunc). A row whose message is not tracked (control
	// traffic) is confirmed without calling Plan; like a lease (see Claim), that confirmation
	// need not survive a crash of the store, after which the row is delivered again (the
	// confirmation of a tracked message's row is as durable as its transition). Confirmed is
	// false, and nothing changes, in
	// the cases Confirm reports false, including a concurrent confirmation that got there
	// first (Plan may have been called by then); a Plan error aborts the call and leaves the
	// row unconfirmed.
	ConfirmAndAdvance(ctx context.Context, req ConfirmRequest) (ConfirmResult, error)

	// Expire is the sweep every frontend runs (several may share the store; each message is
	// returned to exactly one caller). It moves tracked messages still SENT and admitted at or
	// before now-ackTimeout to TIMED_OUT/ACK_TIMEOUT (§11), and tracked messages still SENT
	// whose ExpiresAt passed to FAILED/TTL_EXPIRED (§11; TTL wins when both apply), at most
	// limit of them. It removes from the buffer the rows of those messages that were never
	// claimed (a consumer that never saw them must not get them now); rows already handed to a
	// stream stay until confirmed. Idempotency entries follow: TIMED_OUT makes the entry
	// retrying, TTL_EXPIRED makes it terminal.
	Expire(ctx context.Context, ackTimeout time.Duration, limit int) ([]ExpiredMessage, error)

	// RecordLateAck handles an ACK for a message already TIMED_OUT (§11.1 rules 1 and 4): the
	// message's state does not change, but a successful or failed completion stage
	// (FULFILLED, REJECTED, FAILED) makes its idempotency entry terminal with this message as
	// the original, unless the entry is terminal already. Unknown messages give ErrNotFound.
	RecordLateAck(ctx context.Context, messageID string, stage commonpb.EnvelopeState, code commonpb.ErrorCode, note string) (LateAck, error)

	// CancelUndelivered removes the buffer row of a message if no stream has claimed it yet,
	// reporting whether it did (§11.1 rule 2: an undelivered retry may be cancelled).
	CancelUndelivered(ctx context.Context, messageID string) (bool, error)

	// Idempotency returns the live entry of (producerID, key) within window, or ErrNotFound.
	Idempotency(ctx context.Context, producerID, key string, window time.Duration) (IdempotencyEntry, error)

	// ResumeAfter applies a consumer's resume offset (§5.5): every unconfirmed row of agentID
	// with seq <= offset is confirmed (the consumer says it processed them). It returns
	// *PositionExpiredError when rows after offset were already pruned (they cannot be
	// redelivered), and ErrInvalidPosition for an offset beyond the last seq ever assigned.
	ResumeAfter(ctx context.Context, agentID string, offset int64) error

	// Prune deletes confirmed delivery rows confirmed before cutoff, remembering per agent
	// the highest pruned seq (the resume horizon), and idempotency entries not updated since
	// idempotencyCutoff. It returns how many delivery rows it deleted.
	Prune(ctx context.Context, cutoff, idempotencyCutoff time.Time) (int, error)

	// BufferStats describes every agent's buffer that holds unconfirmed rows.
	BufferStats(ctx context.Context) ([]BufferStat, error)

	// AddPendingResponse starts tracking a response-required request (status "pending").
	// Adding the same RequestMessageID again replaces it. The handoffs (the requester's
	// lifecycle entering WAITING, 004 §2) are written in the same transaction, leased for
	// OutboxLease.
	AddPendingResponse(ctx context.Context, p PendingResponse, entries ...OutboxEntry) error

	// ResolvePendingResponse marks the pending request requestMessageID fulfilled by
	// responseMessageID and returns it; false when there is no pending entry for it (unknown,
	// already fulfilled, or expired). The handoffs (the requester's wait ending) are written
	// in the same transaction, and only when it resolves the entry, leased for OutboxLease.
	ResolvePendingResponse(ctx context.Context, requestMessageID, responseMessageID string, entries ...OutboxEntry) (PendingResponse, bool, error)

	// ExpirePendingResponses claims up to limit pending requests whose Deadline passed,
	// marking them "expired" (each returned to exactly one caller).
	ExpirePendingResponses(ctx context.Context, limit int) ([]PendingResponse, error)

	// PendingResponses lists the pending requests of a producer (empty producerID: all).
	PendingResponses(ctx context.Context, producerID string) ([]PendingResponse, error)

	// Subscribe returns a channel that receives a value (coalesced, never blocking the sender)
	// whenever a row may have become deliverable for agentID — also when it was admitted by
	// another process sharing the store — and a func that ends the subscription.
	Subscribe(ctx context.Context, agentID string) (<-chan struct{}, func())
}

// AgentRecord is the registry's projection of one agent (§14).
type AgentRecord struct {
	// Descriptor is the descriptor the agent registered with.
	Descriptor *registrypb.AgentDescriptor
	// State is the lifecycle state last recorded by the agent's lifecycle workflow (§8).
	State commonpb.AgentState
	// Health is the health map of the last heartbeat.
	Health map[string]string
	// RegisteredAt is when the agent (last) registered.
	RegisteredAt time.Time
	// LastHeartbeat is when the agent last sent a heartbeat; zero if never.
	LastHeartbeat time.Time
}

// Registry is the agent registry projection; the lifecycle workflow owns the state machine,
// this is what routing and discovery read.
type Registry interface {
	// PutAgent inserts or replaces an agent record (registration and re-registration) and
	// writes outbox entries (the start of its lifecycle workflow) to the Outbox in the same
	// transaction, leased for OutboxLease.
	PutAgent(ctx context.Context, rec AgentRecord, entries ...OutboxEntry) error
	// GetAgent returns one agent, or ErrNotFound.
	GetAgent(ctx context.Context, agentID string) (AgentRecord, error)
	// ListAgents returns every registered agent ordered by agent_id.
	ListAgents(ctx context.Context) ([]AgentRecord, error)
	// DeleteAgent removes an agent; it reports whether one was removed. Only when one was, it
	// writes outbox entries (the end of its lifecycle workflow) to the Outbox in the same
	// transaction, leased for OutboxLease.
	DeleteAgent(ctx context.Context, agentID string, entries ...OutboxEntry) (bool, error)
	// RecordHeartbeat stores a heartbeat's time and health map, or returns ErrNotFound.
	RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error
	// SetAgentState records the lifecycle state, or returns ErrNotFound.
	SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error
}

// Event is one audit/observability record (§19): every state transition and every decision.
type Event struct {
	// ID is assigned by the store on Append (increasing).
	ID int64
	// Time is the event time in UTC.
	Time time.Time
	// CorrelationID links the event to a flow (§5.2).
	CorrelationID string
	// Actor is who caused the event: an agent_id, "scheduler", or an operator.
	Actor string
	// Type names the event, e.g. "message.admitted" or "agent.state".
	Type string
	// AgentID is the agent the event concerns, if any.
	AgentID string
	// MessageID is the message the event concerns, if any.
	MessageID string
	// Details is a JSON object with the event's specifics.
	Details []byte
}

// AuditFilter selects events; zero fields match everything.
type AuditFilter struct {
	// CorrelationID matches exactly when set.
	CorrelationID string
	// AgentID matches exactly when set.
	AgentID string
	// MessageID matches exactly when set.
	MessageID string
	// TypePrefix matches events whose Type starts with it.
	TypePrefix string
	// Since keeps events at or after it.
	Since time.Time
	// Limit caps the result (newest last); 0 means 1000.
	Limit int
}

// AuditLog is the append-only audit trail.
type AuditLog interface {
	// Append stores an event and returns it with its ID (and Time, if it was zero) filled in.
	Append(ctx context.Context, e Event) (Event, error)
	// List returns matching events in ID order, oldest first; with more than Limit matches it
	// returns the newest Limit of them.
	List(ctx context.Context, f AuditFilter) ([]Event, error)
}

// BatchAuditLog is implemented by audit logs that can append several events in one round
// trip, in order; the observability sink's background writer uses it when available.
type BatchAuditLog interface {
	// AppendBatch appends the events in order (IDs increasing in slice order) and returns
	// an error if any could not be appended; a failure may leave a prefix appended.
	AppendBatch(ctx context.Context, events []Event) error
}

// Artifact is one versioned negotiation artifact (activity.proto).
type Artifact struct {
	// NegotiationID groups the artifacts of one negotiation.
	NegotiationID string
	// Kind is the artifact kind, e.g. "proposal" or "decision".
	Kind string
	// Version distinguishes revisions of the same kind.
	Version string
	// ContentType is the MIME type of Content.
	ContentType string
	// Content is the artifact body.
	Content []byte
	// CreatedAt is when it was stored.
	CreatedAt time.Time
}

// Artifacts stores negotiation artifacts.
type Artifacts interface {
	// AppendArtifact stores an artifact, or returns ErrDuplicateArtifact when the same
	// (NegotiationID, Kind, Version) exists.
	AppendArtifact(ctx context.Context, a Artifact) error
	// ListArtifacts returns the artifacts of a negotiation, filtered by kind when kind is not
	// empty, in insertion order.
	ListArtifacts(ctx context.Context, negotiationID, kind string) ([]Artifact, error)
}

// HITL invocation statuses.
const (
	// HITLPending marks an invocation waiting for a decision.
	HITLPending = "pending"
	// HITLDecided marks an invocation with an outcome (a human's or a fallback's).
	HITLDecided = "decided"
)

// HITLRecord is the projection of one HITL invocation (§15): what operators list and decide.
// The workflow hitl/<invocation_id> is the source of truth; this row mirrors it for queries.
type HITLRecord struct {
	// InvocationID identifies the invocation (and its workflow, hitl/<invocation_id>).
	InvocationID string
	// WorkflowID is the HITL workflow's ID.
	WorkflowID string
	// ReasonType is the §15 reason type's enum name, e.g. "SECURITY_APPROVAL".
	ReasonType string
	// CorrelationID links the invocation to the flow that raised it.
	CorrelationID string
	// Subject is a short human-readable subject ("task t1 in repo r").
	Subject string
	// Priority is the invocation's priority.
	Priority int32
	// Deadline is when the fallback applies.
	Deadline time.Time
	// Status is HITLPending or HITLDecided.
	Status string
	// Invocation is the full invocation as JSON (hitl.Invocation).
	Invocation []byte
	// Outcome is the outcome as JSON (hitl.Outcome) once decided.
	Outcome []byte
	// CreatedAt is when the invocation was raised.
	CreatedAt time.Time
	// DecidedAt is when it was decided; zero while pending.
	DecidedAt time.Time
}

// HITLFilter selects invocations; zero fields match everything.
type HITLFilter struct {
	// Status matches exactly when set.
	Status string
	// ReasonType matches exactly when set.
	ReasonType string
	// Limit caps the result; 0 means 1000.
	Limit int
}

// HITL is the projection of HITL invocations.
type HITL interface {
	// PutInvocation records a pending invocation. Recording the same InvocationID again while
	// it is pending replaces it (an activity retry); once decided it returns ErrAlreadyDecided.
	PutInvocation(ctx context.Context, rec HITLRecord) error
	// CompleteInvocation stores the outcome and marks the invocation decided. Completing an
	// already decided invocation with the same outcome bytes is a no-op (idempotent retry);
	// with different bytes it returns ErrAlreadyDecided and changes nothing. Unknown ids give
	// ErrNotFound.
	CompleteInvocation(ctx context.Context, invocationID string, outcome []byte, decidedAt time.Time) error
	// GetInvocation returns one invocation, or ErrNotFound.
	GetInvocation(ctx context.Context, invocationID string) (HITLRecord, error)
	// ListInvocations returns matching invocations ordered by creation time (then
	// invocation_id), oldest first; with more than Limit matches it returns the newest Limit.
	ListInvocations(ctx context.Context, f HITLFilter) ([]HITLRecord, error)
}

// PositionExpiredError reports a resume offset older than the retained stream (§5.5).
type PositionExpiredError struct {
	// Offset is the requested position.
	Offset int64
	// Horizon is the highest pruned seq: resuming is possible from Horizon on.
	Horizon int64
}

// Error says what expired.
func (e *PositionExpiredError) Error() string {
	return fmt.Sprintf("store: resume position %d expired; rows up to %d were pruned", e.Offset, e.Horizon)
}

// DLQ error classes (§21.1), as protocol/dlq names them.
const (
	// DLQRetriesExhausted: the retry budget ran out without success.
	DLQRetriesExhausted = pdlq.ClassRetriesExhausted
	// DLQTerminalError: an error that means the operation cannot succeed (validation error,
	// permission denied, malformed message, a consumer's permanent failure...).
	DLQTerminalError = pdlq.ClassTerminalError
	// DLQPolicyViolation: security or resource-limit policy (oversize payload, modality...).
	DLQPolicyViolation = pdlq.ClassPolicyViolation
	// DLQTTLExpired: the message's TTL ran out.
	DLQTTLExpired = pdlq.ClassTTLExpired
)

// DLQAttempt is one attempt in a dead letter's history.
type DLQAttempt struct {
	// MessageID is the attempt's message_id.
	MessageID string `json:"message_id"`
	// At is when it was admitted or rejected.
	At time.Time `json:"at"`
	// State is its final lifecycle state's enum name.
	State string `json:"state"`
	// Reason says how it ended.
	Reason string `json:"reason"`
}

// DLQEntry is one dead letter with the diagnostic context §21.1 requires.
type DLQEntry struct {
	// ID is assigned by the store (increasing).
	ID int64
	// MessageID is the last attempt's message_id.
	MessageID string
	// ProducerID, RecipientID (the route) and CorrelationID give the routing context.
	ProducerID, RecipientID, CorrelationID string
	// IdempotencyToken is the envelope's token, kept for requeues.
	IdempotencyToken string
	// ErrorCode is the final error classification's code.
	ErrorCode commonpb.ErrorCode
	// Class is one of the DLQ* classes.
	Class string
	// Reason explains the failure.
	Reason string
	// Attempts is the attempt history with timestamps and reasons.
	Attempts []DLQAttempt
	// Envelope is the whole envelope (the secure reference to the payload).
	Envelope *commonpb.Envelope
	// PayloadSize and ContentType describe the payload.
	PayloadSize int
	// ContentType is the payload's MIME type.
	ContentType string
	// PayloadExcerpt is the payload's first bytes (at most 256).
	PayloadExcerpt []byte
	// FirstSeenAt is when the first attempt was admitted; FailedAt when it finally failed.
	FirstSeenAt, FailedAt time.Time
	// RequeuedAt and RequeuedAs are set once an operator requeued it.
	RequeuedAt time.Time
	// RequeuedAs is the message_id of the requeued attempt.
	RequeuedAs string
}

// DLQFilter selects dead letters (§21.1: time range, error class, route, producer); zero
// fields match everything.
type DLQFilter struct {
	// Since and Until bound FailedAt (inclusive, exclusive).
	Since, Until time.Time
	// Class matches exactly when set.
	Class string
	// ErrorCode matches exactly when set.
	ErrorCode commonpb.ErrorCode
	// RecipientID (the route) matches exactly when set.
	RecipientID string
	// ProducerID matches exactly when set.
	ProducerID string
	// IncludeRequeued includes entries already requeued.
	IncludeRequeued bool
	// Limit caps the result (oldest first, newest Limit kept); 0 means 1000.
	Limit int
}

// ErrAlreadyRequeued reports that a dead letter was requeued before.
var ErrAlreadyRequeued = errors.New("store: dead letter already requeued")

// DLQ is the dead-letter queue (§21.1).
type DLQ interface {
	// PutDeadLetter stores an entry and returns it with ID set. A second entry for the same
	// MessageID returns the existing one unchanged (a sweep retried).
	PutDeadLetter(ctx context.Context, e DLQEntry) (DLQEntry, error)
	// GetDeadLetter returns one entry, or ErrNotFound.
	GetDeadLetter(ctx context.Context, id int64) (DLQEntry, error)
	// ListDeadLetters returns matching entries ordered by ID.
	ListDeadLetters(ctx context.Context, f DLQFilter) ([]DLQEntry, error)
	// MarkRequeued records that the entry was requeued as newMessageID; ErrAlreadyRequeued if
	// it was before, ErrNotFound if unknown.
	MarkRequeued(ctx context.Context, id int64, newMessageID string, at time.Time) error
	// PurgeDeadLetters deletes entries that failed before cutoff (retention) and returns how many.
	PurgeDeadLetters(ctx context.Context, cutoff time.Time) (int, error)
}
