package store

import (
	"context"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

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
	// TraceParent is the W3C trace context the message was admitted in (AdmitRequest.TraceParent).
	TraceParent string
}

// Operation names one logical operation of a producer (§11.3): its attempts are the messages
// that carry its producer_id, correlation_id and idempotency_token, each with a message_id
// of its own.
type Operation struct {
	// ProducerID, CorrelationID and IdempotencyToken are the attempts' envelope fields.
	ProducerID, CorrelationID, IdempotencyToken string
}

// Valid reports whether every field is set: a message without an idempotency token is an
// operation of its own, which OperationAttempts does not look for.
func (op Operation) Valid() bool {
	return op.ProducerID != "" && op.CorrelationID != "" && op.IdempotencyToken != ""
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
	// TraceParent is the W3C `traceparent` of the span the message was admitted in, "" for
	// none (tracing off): kept with the message and its delivery row, so that the delivery on
	// the recipient's stream and its ACK continue the sender's trace (docs/observability.md).
	TraceParent string
	// Audit, when set, is appended to the audit log in the admission's transaction, only
	// when the message is enqueued (§19: the admission and its record stand or fall
	// together, so a crash cannot leave an admitted message unaudited). Its MessageID is the
	// envelope's and its Time the store's clock; its Details, a JSON object or empty, gain
	// "seq", the delivery's position in the recipient's buffer.
	Audit *Event
}

// AdmitResult is one member's outcome in AdmitBatch: its delivery seq, or the error Admit
// would have returned for it.
type AdmitResult struct {
	// Seq is the delivery seq when Err is nil.
	Seq int64
	// Err is the member's failure (ErrBufferFull, ErrDuplicateMessage, a *DedupError, …).
	Err error
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
	// TraceParent is the W3C trace context the row was admitted in (AdmitRequest.TraceParent).
	TraceParent string
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

	// AdmitBatch admits every request as Admit would, in order, and writes them together (on
	// PostgreSQL one transaction and one commit): a fan-out to many recipients costs one
	// write. Each member is decided as if admitted alone after the members before it — their
	// rows count against a shared recipient's capacity, their idempotency entries and
	// message_ids are known — and a member's own refusal (ErrBufferFull,
	// ErrDuplicateMessage, a *DedupError) refuses only it: results[i] is reqs[i]'s seq or
	// error, one per request, and no member is reported admitted before it is durable. Any
	// other failure (the store unreachable) fails every member and admits none, so that
	// members to one recipient are never admitted with a gap.
	AdmitBatch(ctx context.Context, reqs []AdmitRequest) []AdmitResult

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

	// DataDepth returns how many of agentID's unconfirmed rows count against its buffer's
	// capacity: the data rows (§13; AdmitRequest.Capacity), without the control traffic.
	DataDepth(ctx context.Context, agentID string) (int, error)

	// GetMessage returns a tracked message's record, or ErrNotFound.
	GetMessage(ctx context.Context, messageID string) (MessageRecord, error)

	// OperationAttempts returns the records of every tracked message of op — admitted, or
	// refused and recorded REJECTED (ALREADY_IN_PROGRESS, DUPLICATE_DETECTED, BUFFER_FULL) —
	// oldest first (CreatedAt, then message_id in byte order). A message belongs to op when
	// its producer_id, correlation_id and envelope's idempotency_token are op's, however it
	// was admitted: through the idempotency cache, or around it (the router's request retries,
	// an operator's requeue). An op with any field empty has none. The router reads it for a
	// dead letter's attempt history (§21.1).
	OperationAttempts(ctx context.Context, op Operation) ([]MessageRecord, error)

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

	// Attach makes the returned inbox the taker of agentID's new rows in this process — the
	// router attaches the stream it serves agentID on, in place of any attached before — until
	// the returned func detaches it. While it is attached, a row admitted through this store
	// (Admit, AdmitBatch, a step's follow-up) that finds none of agentID's other rows
	// deliverable is stored leased for the inbox's lease with Attempts 1, wakes no subscriber,
	// and is put into the inbox once durable; a row that finds others deliverable is stored
	// as before, for Claim, so a lane's rows are never handed out of order. A handed row is
	// then like a claimed one: redelivered when its lease runs out, released by ReleaseLeases.
	// Detaching makes the rows put but never taken deliverable again.
	Attach(agentID string, lease time.Duration) (*Inbox, func())
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
