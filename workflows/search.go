// Package workflows holds SW4RM's Temporal workflows, one file per coordination pattern.
// Each file owns its names: the workflow-ID helper, the signal, update and query names and
// their typed payloads. Workflow code here is deterministic: it does no I/O, reads time only
// through workflow.Now and delegates every side effect to activities.
package workflows

import (
	"maps"
	"slices"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Custom search attributes that make SW4RM runs filterable in the Temporal UI and by the
// frontend. worker.EnsureSearchAttributes registers them in the namespace on start.
var (
	// KindKey names the coordination pattern of a run ("agent", "task", "negotiation", ...).
	KindKey = temporal.NewSearchAttributeKeyKeyword("SW4RMKind")
	// AgentIDKey is the agent a run belongs to.
	AgentIDKey = temporal.NewSearchAttributeKeyKeyword("SW4RMAgentID")
	// AgentStateKey is an agent lifecycle run's current state (§8), e.g. "RUNNABLE".
	AgentStateKey = temporal.NewSearchAttributeKeyKeyword("SW4RMAgentState")
	// HitlPendingKey marks runs waiting for a human decision (§15): the HITL wait itself and
	// the workflow that raised it.
	HitlPendingKey = temporal.NewSearchAttributeKeyBool("SW4RMHitlPending")
	// RoomIDKey is a negotiation room coordinator's room (§17.5).
	RoomIDKey = temporal.NewSearchAttributeKeyKeyword("SW4RMRoomID")
	// HandoffStateKey is a handoff's state (§17.6): PENDING, ACCEPTED, COMPLETED, REJECTED
	// or EXPIRED.
	HandoffStateKey = temporal.NewSearchAttributeKeyKeyword("SW4RMHandoffState")
	// HandoffAgentsKey lists a handoff's agents: the originator and every agent offered it
	// so far, so `SW4RMHandoffAgents = 'b'` finds every handoff that involved b.
	HandoffAgentsKey = temporal.NewSearchAttributeKeyKeywordList("SW4RMHandoffAgents")
	// DAGStateKey is a DAG run's state (§17.7): RUNNING, WAITING (a node failed; the run
	// waits for ResumeWorkflow), COMPLETED or FAILED.
	DAGStateKey = temporal.NewSearchAttributeKeyKeyword("SW4RMDAGState")
	// WorktreeStateKey is a worktree binding's state (§16.1), e.g. "BIND_FAILED": operators
	// list the agents whose bind failed with SW4RMKind = 'worktree' AND SW4RMWorktreeState =
	// 'BIND_FAILED'.
	WorktreeStateKey = temporal.NewSearchAttributeKeyKeyword("SW4RMWorktreeState")
)

// SearchAttributes lists every custom search attribute with its type, for registration.
func SearchAttributes() map[string]enums.IndexedValueType {
	return map[string]enums.IndexedValueType{
		KindKey.GetName():          enums.INDEXED_VALUE_TYPE_KEYWORD,
		AgentIDKey.GetName():       enums.INDEXED_VALUE_TYPE_KEYWORD,
		AgentStateKey.GetName():    enums.INDEXED_VALUE_TYPE_KEYWORD,
		HitlPendingKey.GetName():   enums.INDEXED_VALUE_TYPE_BOOL,
		RoomIDKey.GetName():        enums.INDEXED_VALUE_TYPE_KEYWORD,
		HandoffStateKey.GetName():  enums.INDEXED_VALUE_TYPE_KEYWORD,
		HandoffAgentsKey.GetName(): enums.INDEXED_VALUE_TYPE_KEYWORD_LIST,
		DAGStateKey.GetName():      enums.INDEXED_VALUE_TYPE_KEYWORD,
		WorktreeStateKey.GetName(): enums.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// flagTypes spells the attribute types the way `temporal server start-dev` reads them.
var flagTypes = map[enums.IndexedValueType]string{
	enums.INDEXED_VALUE_TYPE_KEYWORD:      "Keyword",
	enums.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
	enums.INDEXED_VALUE_TYPE_BOOL:         "Bool",
}

// SearchAttributeFlags returns SearchAttributes as the flags of `temporal server start-dev`
// ("--search-attribute", "Name=Type" pairs, sorted by name): what `make dev` (through
// `sw4rm search-attributes`) and the test harnesses start their dev servers with.
func SearchAttributeFlags() []string {
	attrs := SearchAttributes()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		out = append(out, "--search-attribute", name+"="+flagTypes[attrs[name]])
	}
	return out
}
