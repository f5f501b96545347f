// Package memory is the in-process implementation of store.Store: the embedded default for
// `sw4rm dev` and unit tests. Everything lives in mutex-protected maps and is lost when the
// process exits, like the Temporal dev server's default database. It passes the same
// conformance suite (store/storetest) as store/postgres, so code tested against it behaves
// the same in production.
package memory

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/internal/hub"
)

// defaultAuditLimit is the List limit used when AuditFilter.Limit is zero (see store.AuditFilter).
const defaultAuditLimit = 1000

// Store is the in-memory store.Store. The zero value is not usable; create one with New.
type Store struct {
	mu sync.Mutex

	// keyState holds agents' keys and nonces (see keys.go), made on first use.
	keyState *keyState
	keysOnce sync.Once

	// dlq is the dead-letter queue; it has its own lock (see dlq.go).
	dlq *dlqState

	// seq is the last delivery seq handed out; seqs start at 1 and are global to the store.
	seq int64
	// messages holds every admitted or recorded message_id, tracked or not, so that
	// duplicates are detected even for untracked control traffic.
	messages map[string]*messageRow
	// deliveries holds the delivery rows by seq, unconfirmed and confirmed; Prune deletes
	// confirmed ones (and Expire/CancelUndelivered never-claimed ones).
	deliveries map[int64]*deliveryRow
	// pending lists each agent's unconfirmed seqs in increasing order (the inbound buffer).
	pending map[string][]int64
	// data counts each agent's unconfirmed rows admitted with a capacity: what the capacity
	// limits (§13), without the control traffic pending also holds.
	data map[string]int
	// sent holds the ids of tracked messages in state SENT: the candidates of Expire.
	sent map[string]struct{}
	// idem is the idempotency cache by (producer, key).
	idem map[idemKey]*store.IdempotencyEntry
	// horizons is each agent's resume horizon: the highest seq Prune deleted.
	horizons map[string]int64
	// responses holds the pending responses by request message_id; resolving or expiring one
	// removes it.
	responses map[string]*store.PendingResponse

	agents map[string]*agentRow

	eventSeq int64
	events   []store.Event

	artifacts []store.Artifact

	// hitl holds the HITL invocation projection by invocation_id; the records own their byte
	// slices (copied on the way in and out).
	hitl map[string]*store.HITLRecord

	// outbox holds the undelivered outbox entries by ID (see outbox.go);
	// outboxOrder numbers them in insertion order.
	outbox      map[string]*outboxRow
	outboxOrder int64

	// handoffReqs holds the handoff projection (§17.6) by request_id, fences the fences by
	// (correlation, agent) (see handoffs.go); they share s.mu with the outbox so that a
	// handoff and the start of its workflow are written together.
	handoffReqs      map[string]*handoffReqRow
	handoffReqOrder  int64
	fences           map[fenceKey]store.Fence
	fencesGeneration int64

	// definitions holds the versions of each DAG workflow definition, oldest first (see
	// definitions.go); version v is at index v-1.
	definitions map[string][]store.WorkflowDefinitionRecord

	// basePolicy is the base negotiation policy (nil until set) and profiles the policy
	// profiles by name (see negotiation_policies.go).
	basePolicy *policyRow[*policypb.NegotiationPolicy]
	profiles   map[string]policyRow[*policypb.PolicyProfile]

	// worktrees is the worktree binding projection by agent_id (see worktrees.go), made on
	// first write.
	worktrees map[string]store.WorktreeBinding

	// toolProviders holds each tool provider's descriptor set by provider_id (see
	// tool_providers.go), made on first write.
	toolProviders map[string]*toolProviderRow

	// toolCalls holds each tool call and its frames by call_id (see tool_calls.go), made on
	// first write.
	toolCalls map[string]*toolCallRow
	// toolSlots holds the concurrency slots of each tool: call_id → lease end.
	toolSlots map[slotKey]map[string]time.Time

	// hub fans wake-ups out to Subscribe channels. It has its own lock and never blocks, so
	// it is safe to wake it while s.mu is held.
	hub *hub.Hub
}

type messageRow struct {
	tracked   bool
	recipient string
	producer  string
	corrID    string
	msgType   commonpb.MessageType
	state     commonpb.EnvelopeState
	errCode   commonpb.ErrorCode
	note      string
	envelope  []byte
	createdAt time.Time
	updatedAt time.Time
	expiresAt time.Time // zero: no TTL
	// dedupProducer and dedupKey name the idempotency entry it was admitted under.
	dedupProducer string
	dedupKey      string
	// seq is the message's delivery row (0 when it never had one).
	seq int64
	// traceParent is store.AdmitRequest.TraceParent.
	traceParent string
}

type deliveryRow struct {
	seq         int64
	agentID     string
	messageID   string
	envelope    []byte
	enqueuedAt  time.Time
	leasedUntil time.Time // zero when not leased
	attempts    int
	lane        int32     // store.LaneRank of the row's communication class
	expiresAt   time.Time // zero: no TTL
	confirmedAt time.Time // zero while the row is in the buffer
	// counted marks a row admitted with a capacity (data), which takes a slot of it.
	counted bool
	// traceParent is its message's (messageRow.traceParent).
	traceParent string
}

type agentRow struct {
	descriptor    []byte
	state         commonpb.AgentState
	health        map[string]string
	registeredAt  time.Time
	lastHeartbeat time.Time
}

var _ store.Store = (*Store)(nil)

// New returns an empty in-memory store.
func New() *Store {
	return &Store{
		messages:    make(map[string]*messageRow),
		deliveries:  make(map[int64]*deliveryRow),
		pending:     make(map[string][]int64),
		data:        make(map[string]int),
		sent:        make(map[string]struct{}),
		idem:        make(map[idemKey]*store.IdempotencyEntry),
		horizons:    make(map[string]int64),
		responses:   make(map[string]*store.PendingResponse),
		agents:      make(map[string]*agentRow),
		hitl:        make(map[string]*store.HITLRecord),
		outbox:      make(map[string]*outboxRow),
		handoffReqs: make(map[string]*handoffReqRow),
		fences:      make(map[fenceKey]store.Fence),
		definitions: make(map[string][]store.WorkflowDefinitionRecord),
		hub:         hub.New(),
		dlq:         newDLQState(),
	}
}

// Messages returns the routed message plane.
func (s *Store) Messages() store.MessagePlane { return (*messagePlane)(s) }

// Registry returns the agent registry projection.
func (s *Store) Registry() store.Registry { return (*registry)(s) }

// Audit returns the audit log.
func (s *Store) Audit() store.AuditLog { return (*auditLog)(s) }

// Artifacts returns the negotiation artifact store.
func (s *Store) Artifacts() store.Artifacts { return (*artifacts)(s) }

// HITL returns the human-in-the-loop invocation projection.
func (s *Store) HITL() store.HITL { return (*hitl)(s) }

// DLQ returns the dead-letter queue.
func (s *Store) DLQ() store.DLQ { return s.dlq }

// Kind returns "memory".
func (s *Store) Kind() string { return "memory" }

// Close ends every subscription. The data stays readable; the store has no connections or
// goroutines to release.
func (s *Store) Close() {
	s.hub.Close()
}

// now returns the current time in UTC at microsecond precision, the precision PostgreSQL
// keeps, so both implementations hand back identical timestamps.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// normTime converts a caller-supplied time the same way PostgreSQL's timestamptz would.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func marshalEnvelope(env *commonpb.Envelope) ([]byte, error) {
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("memory: marshal envelope: %w", err)
	}
	return b, nil
}

// unmarshalEnvelope decodes stored bytes into a fresh message, so every caller gets its own
// copy and can never reach the stored state.
func unmarshalEnvelope(b []byte) (*commonpb.Envelope, error) {
	env := &commonpb.Envelope{}
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("memory: unmarshal envelope: %w", err)
	}
	return env, nil
}

// cloneBytes copies b; empty becomes nil, as a NULL column reads back in store/postgres.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}
