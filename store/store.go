// Package store defines the persistent state that SW4RM keeps outside Temporal. Store bundles
// one sub-store per domain, each declared in the file named after it:
//
//   - MessagePlane (messages.go, with idempotency.go and responses.go): the routed message
//     plane — per-agent inbound buffers, delivery and ACK states, the idempotency cache and
//     the requests awaiting a response (§11–§13, 004);
//   - Registry (registry.go): the agent registry projection (§14);
//   - AuditLog (audit.go): the append-only audit log (§19);
//   - Artifacts (artifacts.go): the versioned negotiation artifacts;
//   - HITL (hitl.go): the human-in-the-loop invocation projection (§15);
//   - DLQ (dlq.go): the dead-letter queue (§21.1);
//   - Outbox (outbox.go): the entries promised to Temporal in the same transaction as the
//     write they report;
//   - ActivityBuffer (activity_buffer.go): the scheduler's activity buffer (§10);
//   - Keys (keys.go): the agents' public keys and the nonces of signed calls (§6.2, §23);
//   - Handoffs (handoffs.go): the agent handoff projection and fences (§17.6);
//   - WorkflowDefinitions (definitions.go): the versioned DAG workflow definitions (§17.7);
//   - NegotiationPolicies (negotiation_policies.go): the base negotiation policy and the
//     policy profiles (§17.2);
//   - Worktrees (worktrees.go): the worktree binding projection (§16);
//   - ToolProviders (tool_providers.go): the tool providers and their descriptors (§18.1);
//   - ToolCalls (tool_calls.go): the tool calls and their stored frames (§18.2);
//   - Retention (retention.go): the deletion of finished records past their retention.
//
// rules.go holds the rules both implementations apply in the same way. Two implementations
// satisfy these interfaces — store/memory for `sw4rm dev` and unit tests, store/postgres for
// production — and store/storetest holds the one conformance suite that both must pass.
package store

import "errors"

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
	// Retention returns the deletion of finished records past their retention.
	Retention() Retention
	// BacklogCounter counts the pending HITL invocations, the dead letters, the open
	// handoffs and the tool calls in flight (backlog.go).
	BacklogCounter
	// Kind names the implementation ("memory" or "postgres") for logs.
	Kind() string
	// Close releases connections and stops background work.
	Close()
}
