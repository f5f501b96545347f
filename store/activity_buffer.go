package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The Activity Buffer (§10, §10.1): Store.ActivityBuffer returns it.

// Activity buffer defaults (§10.1).
const (
	// DefaultActivityMaxActive is the default limit on active entries in total (§10.1: 10,000
	// per Scheduler instance; the instance here is the store every frontend shares).
	DefaultActivityMaxActive = 10000
	// DefaultActivityMaxPerAgent is the default limit on one agent's active entries (§10.1).
	DefaultActivityMaxPerAgent = 100
	// ActivityHistoryPerAgent is how many completed or failed entries are kept per agent: when
	// an agent completes one more, its oldest history entry is evicted (§10.1 count-based
	// eviction).
	ActivityHistoryPerAgent = 50
	// DefaultActivityListLimit is the List and History limit used when the caller passes none.
	DefaultActivityListLimit = 1000
	// ActivityWarnRatio is the utilisation past which callers should warn operators (§10.1:
	// "exceeds 80% capacity").
	ActivityWarnRatio = 0.8
	// MaxActivityDescriptionWords bounds ActivityEntry.Description (§10: <= 200 words, words
	// being runs of non-space characters).
	MaxActivityDescriptionWords = 200
	// MaxActivityDescriptionBytes additionally bounds Description in bytes, so that 200
	// "words" cannot be arbitrarily long.
	MaxActivityDescriptionBytes = 8192
)

var (
	// ErrActivityBufferFull reports that a Put was rejected because a limit is reached
	// (§10.1 error_code=activity_buffer_full). Put returns an *ActivityFullError wrapping it.
	ErrActivityBufferFull = errors.New("store: activity buffer full")
	// ErrInvalidActivity reports an entry, status or argument the activity buffer refuses; it
	// is wrapped with the detail.
	ErrInvalidActivity = errors.New("store: invalid activity")
)

// ActivityFullError is the error Put returns when a limit rejects an entry; errors.Is(err,
// ErrActivityBufferFull) holds.
type ActivityFullError struct {
	// AgentID is the agent whose entry was rejected.
	AgentID string
	// PerAgent is true when the agent's own limit was reached, false for the total limit.
	PerAgent bool
	// Limit is the limit that was reached.
	Limit int
}

// Error describes the limit that was reached.
func (e *ActivityFullError) Error() string {
	if e.PerAgent {
		return fmt.Sprintf("%v: agent %q already has %d active entries (the per-agent limit)", ErrActivityBufferFull, e.AgentID, e.Limit)
	}
	return fmt.Sprintf("%v: %d active entries in total (the limit)", ErrActivityBufferFull, e.Limit)
}

// Unwrap makes errors.Is(err, ErrActivityBufferFull) hold.
func (e *ActivityFullError) Unwrap() error { return ErrActivityBufferFull }

// ActivityStatus is the state of an activity entry.
type ActivityStatus string

// Activity entry statuses.
const (
	// ActivityActive: the task is in flight; the entry is in the active buffer.
	ActivityActive ActivityStatus = "active"
	// ActivityCompleted: the task completed; the entry is in the history.
	ActivityCompleted ActivityStatus = "completed"
	// ActivityFailed: the task failed; the entry is in the history.
	ActivityFailed ActivityStatus = "failed"
	// ActivityCancelled: the task's workflow was cancelled; the entry is in the history. Only
	// the scheduler's reconciliation (§10) records it.
	ActivityCancelled ActivityStatus = "cancelled"
	// ActivityUnknown: nothing is known of how the task ended (its workflow is gone, §10
	// "unknown states"); the entry is in the history. Only the scheduler's reconciliation
	// records it.
	ActivityUnknown ActivityStatus = "unknown"
)

// ActivityEntry is one activity record (§10): what an agent is doing, on which repository,
// worktree and branch. An active entry is identified by (AgentID, TaskID).
type ActivityEntry struct {
	// AgentID is the agent doing the work (required).
	AgentID string
	// TaskID is the task (required); unique among the agent's active entries.
	TaskID string
	// RepoID, WorktreeID and Branch locate the work; each may be empty.
	RepoID, WorktreeID, Branch string
	// Description says what the agent does, at most 200 words.
	Description string
	// Scope is the task's scope metadata as submitted (§9.2), which the scheduler compares
	// with the scopes of concurrent tasks; at most MaxActivityDescriptionBytes.
	Scope string
	// JobKey is the task's job identity (§9.2 job uniqueness); empty for entries that were
	// not created by the scheduler.
	JobKey string
	// Status is ActivityActive for active entries and ActivityCompleted, ActivityFailed,
	// ActivityCancelled or ActivityUnknown for history entries. Put ignores it.
	Status ActivityStatus
	// WaitingOn is what the task waits for while its agent is WAITING (a message_id or
	// correlation_id, 004 §6); empty when not waiting.
	WaitingOn string
	// WaitingSince is when WaitingOn was set; zero when not waiting.
	WaitingSince time.Time
	// CreatedAt is the entry's timestamp: when it was created (§10).
	CreatedAt time.Time
	// HLC is the Hybrid Logical Clock reading of the entry's creation (§4, protocol/hlc's
	// text form); "" when it was created without one. Like CreatedAt, a replacing Put keeps it.
	HLC string
	// CompletedAt is when the entry moved to the history; zero while active. Put ignores it.
	CompletedAt time.Time
}

// ActivityLimits are the limits a Put enforces (§10.1). A zero field takes its default
// (DefaultActivityMaxActive, DefaultActivityMaxPerAgent); a negative field disables that
// limit, which §10.1 allows only when documented: a deployment doing so must warn its operators
// that the active buffer can then grow without bound (the history stays bounded).
type ActivityLimits struct {
	// MaxActive limits active entries in total.
	MaxActive int
	// MaxPerAgent limits the active entries of one agent.
	MaxPerAgent int
}

// Effective returns the limits with defaults applied.
func (l ActivityLimits) Effective() ActivityLimits {
	if l.MaxActive == 0 {
		l.MaxActive = DefaultActivityMaxActive
	}
	if l.MaxPerAgent == 0 {
		l.MaxPerAgent = DefaultActivityMaxPerAgent
	}
	return l
}

// ActivityUsage reports how full the active buffer is, so callers can warn past 80% (§10.1).
type ActivityUsage struct {
	// Active counts active entries in total.
	Active int
	// AgentActive counts the active entries of the agent asked about.
	AgentActive int
	// Limits are the effective limits (defaults applied).
	Limits ActivityLimits
}

// Utilization is Active / Limits.MaxActive, or 0 when that limit is disabled.
func (u ActivityUsage) Utilization() float64 { return ratio(u.Active, u.Limits.MaxActive) }

// AgentUtilization is AgentActive / Limits.MaxPerAgent, or 0 when that limit is disabled.
func (u ActivityUsage) AgentUtilization() float64 {
	return ratio(u.AgentActive, u.Limits.MaxPerAgent)
}

// Warn reports whether either utilisation exceeds ActivityWarnRatio.
func (u ActivityUsage) Warn() bool {
	return u.Utilization() > ActivityWarnRatio || u.AgentUtilization() > ActivityWarnRatio
}

func ratio(n, limit int) float64 {
	if limit <= 0 {
		return 0
	}
	return float64(n) / float64(limit)
}

// ActivityFilter selects active or history entries (§10 filtered reads); empty fields match
// everything.
type ActivityFilter struct {
	// AgentID, RepoID, WorktreeID and TaskID must equal the entry's when set.
	AgentID, RepoID, WorktreeID, TaskID string
	// Limit caps the entries returned; zero or negative means DefaultActivityListLimit.
	Limit int
}

// ActivityBuffer tracks in-flight agent work (§10). It is advisory: nothing in it blocks task
// scheduling or execution. Every returned time is in UTC at microsecond precision.
//
// Concurrent Puts never take the buffer past a limit, also across processes sharing a store.
type ActivityBuffer interface {
	// Put creates the active entry (e.AgentID, e.TaskID) before its task executes, with Status
	// ActivityActive and no CompletedAt whatever e says. A zero CreatedAt means now; a
	// WaitingOn without WaitingSince is stamped now; WaitingSince is dropped without WaitingOn.
	//
	// When the agent already has an active entry for the task, Put replaces its fields and
	// keeps its CreatedAt (a retried registration); that never counts against a limit.
	// Otherwise, when the total limit or the agent's limit is reached, Put stores nothing and
	// returns an *ActivityFullError (errors.Is ErrActivityBufferFull), the total limit being
	// checked first; entries are never dropped to make room (§10.1). An entry that fails
	// ValidateActivityEntry returns an error wrapping ErrInvalidActivity.
	//
	// The usage returned describes the buffer after the Put (before it when the Put failed),
	// for e.AgentID.
	Put(ctx context.Context, e ActivityEntry, lim ActivityLimits) (ActivityUsage, error)
	// Complete moves the agent's active entry for the task to the history with the status
	// (ActivityCompleted, ActivityFailed, ActivityCancelled or ActivityUnknown, else
	// ErrInvalidActivity) and CompletedAt now, and returns it as stored in the history. The
	// agent keeps its ActivityHistoryPerAgent most recently completed entries; older ones are
	// evicted. ErrNotFound when there is no such active entry: of concurrent Completes of one
	// entry exactly one succeeds, which is what lets several reconcilers sweep at once.
	Complete(ctx context.Context, agentID, taskID string, status ActivityStatus) (ActivityEntry, error)
	// SetWaitingOn records what the active entry waits for (004 §6) and returns the entry:
	// WaitingSince becomes now, unless WaitingOn already had this value (then it is kept); an
	// empty waitingOn clears both. ErrNotFound when there is no such active entry.
	SetWaitingOn(ctx context.Context, agentID, taskID, waitingOn string) (ActivityEntry, error)
	// List returns the active entries that match the filter, ordered by CreatedAt (then by
	// creation order), the first Limit of them.
	List(ctx context.Context, f ActivityFilter) ([]ActivityEntry, error)
	// History returns the history entries (of ended tasks, the short history of §10) that
	// match the filter, most recently completed first, the first Limit of them.
	History(ctx context.Context, f ActivityFilter) ([]ActivityEntry, error)
	// Purge deletes the agent's active entries for the tasks (the Scheduler reconciling tasks
	// that are COMPLETED, FAILED or unknown, §10) and returns how many it deleted; unknown or
	// repeated task IDs count nothing. Purged entries do not enter the history. An empty
	// agentID is ErrInvalidActivity.
	Purge(ctx context.Context, agentID string, taskIDs []string) (int, error)
	// Usage reports the buffer's usage for agentID under the limits, without changing it.
	Usage(ctx context.Context, agentID string, lim ActivityLimits) (ActivityUsage, error)
}

// ActivityDescriptionWords counts the words of a description: runs of non-space characters.
func ActivityDescriptionWords(s string) int { return len(strings.Fields(s)) }

// ValidateActivityEntry checks what Put requires of an entry: AgentID and TaskID set, a
// Description of at most MaxActivityDescriptionWords words and MaxActivityDescriptionBytes
// bytes, and every string valid UTF-8 without NUL (what PostgreSQL text can hold). The error
// wraps ErrInvalidActivity.
func ValidateActivityEntry(e ActivityEntry) error {
	switch {
	case e.AgentID == "":
		return fmt.Errorf("%w: agent_id is required", ErrInvalidActivity)
	case e.TaskID == "":
		return fmt.Errorf("%w: task_id is required", ErrInvalidActivity)
	}
	for _, f := range []struct{ name, v string }{
		{"agent_id", e.AgentID}, {"task_id", e.TaskID}, {"repo_id", e.RepoID},
		{"worktree_id", e.WorktreeID}, {"branch", e.Branch}, {"description", e.Description},
		{"waiting_on", e.WaitingOn}, {"scope", e.Scope}, {"job_key", e.JobKey},
	} {
		if err := ValidateActivityText(f.name, f.v); err != nil {
			return err
		}
	}
	if n := ActivityDescriptionWords(e.Description); n > MaxActivityDescriptionWords {
		return fmt.Errorf("%w: description has %d words, at most %d are allowed", ErrInvalidActivity, n, MaxActivityDescriptionWords)
	}
	if n := len(e.Description); n > MaxActivityDescriptionBytes {
		return fmt.Errorf("%w: description has %d bytes, at most %d are allowed", ErrInvalidActivity, n, MaxActivityDescriptionBytes)
	}
	if n := len(e.Scope); n > MaxActivityDescriptionBytes {
		return fmt.Errorf("%w: scope has %d bytes, at most %d are allowed", ErrInvalidActivity, n, MaxActivityDescriptionBytes)
	}
	if n := len(e.JobKey); n > 256 {
		return fmt.Errorf("%w: job_key has %d bytes, at most 256 are allowed", ErrInvalidActivity, n)
	}
	return nil
}

// ValidateActivityText checks that a string field is valid UTF-8 without NUL; the error wraps
// ErrInvalidActivity and names the field.
func ValidateActivityText(field, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidActivity, field)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidActivity, field)
	}
	return nil
}

// ValidateActivityCompletion checks Complete's status: ActivityCompleted, ActivityFailed,
// ActivityCancelled or ActivityUnknown.
func ValidateActivityCompletion(status ActivityStatus) error {
	switch status {
	case ActivityCompleted, ActivityFailed, ActivityCancelled, ActivityUnknown:
		return nil
	}
	return fmt.Errorf("%w: completion status %q is not %q, %q, %q or %q", ErrInvalidActivity, status,
		ActivityCompleted, ActivityFailed, ActivityCancelled, ActivityUnknown)
}

// ValidateActivityKey checks the agent_id and task_ids an operation addresses: each valid
// UTF-8 without NUL (emptiness is the operation's business). The error wraps
// ErrInvalidActivity.
func ValidateActivityKey(agentID string, taskIDs ...string) error {
	if err := ValidateActivityText("agent_id", agentID); err != nil {
		return err
	}
	for _, id := range taskIDs {
		if err := ValidateActivityText("task_id", id); err != nil {
			return err
		}
	}
	return nil
}

// ValidateActivityFilter checks that the filter's strings are valid UTF-8 without NUL. The
// error wraps ErrInvalidActivity.
func ValidateActivityFilter(f ActivityFilter) error {
	for _, x := range []struct{ name, v string }{
		{"agent_id", f.AgentID}, {"repo_id", f.RepoID}, {"worktree_id", f.WorktreeID}, {"task_id", f.TaskID},
	} {
		if err := ValidateActivityText(x.name, x.v); err != nil {
			return err
		}
	}
	return nil
}
