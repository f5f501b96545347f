package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// activityStates holds each Store's activity buffer (*Store -> *activityState), created on
// first use. The Store type has no field for it, so an entry lives as long as the process,
// also after Close, like the rest of an in-memory store's data; the memory store is for
// `sw4rm dev` and tests, where that is harmless.
var activityStates sync.Map

var _ store.Store = (*Store)(nil)

// ActivityBuffer returns the store's activity buffer (§10).
func (s *Store) ActivityBuffer() store.ActivityBuffer {
	if v, ok := activityStates.Load(s); ok {
		return v.(*activityState)
	}
	v, _ := activityStates.LoadOrStore(s, newActivityState())
	return v.(*activityState)
}

type activityKey struct{ agentID, taskID string }

// activityRow is an entry with the sequence number that orders it among entries with the same
// CreatedAt (active) or by completion (history).
type activityRow struct {
	seq int64
	e   store.ActivityEntry
}

// activityState is the in-memory activity buffer. It has its own lock.
type activityState struct {
	mu  sync.Mutex
	seq int64
	// active holds the active entries; perAgent counts them by agent.
	active   map[activityKey]*activityRow
	perAgent map[string]int
	// history holds each agent's completed entries, oldest first, at most
	// store.ActivityHistoryPerAgent of them.
	history map[string][]activityRow
}

func newActivityState() *activityState {
	return &activityState{
		active:   make(map[activityKey]*activityRow),
		perAgent: make(map[string]int),
		history:  make(map[string][]activityRow),
	}
}

func (a *activityState) nextSeq() int64 {
	a.seq++
	return a.seq
}

// usage reports the usage for agentID; a.mu is held.
func (a *activityState) usage(agentID string, lim store.ActivityLimits) store.ActivityUsage {
	return store.ActivityUsage{Active: len(a.active), AgentActive: a.perAgent[agentID], Limits: lim}
}

// Put implements store.ActivityBuffer.
func (a *activityState) Put(ctx context.Context, e store.ActivityEntry, lim store.ActivityLimits) (store.ActivityUsage, error) {
	lim = lim.Effective()
	if err := ctx.Err(); err != nil {
		return store.ActivityUsage{Limits: lim}, err
	}
	if err := store.ValidateActivityEntry(e); err != nil {
		return store.ActivityUsage{Limits: lim}, fmt.Errorf("memory: put activity: %w", err)
	}
	e.Status = store.ActivityActive
	e.CompletedAt = time.Time{}
	e.CreatedAt = normTime(e.CreatedAt)
	e.WaitingSince = normTime(e.WaitingSince)
	if e.WaitingOn == "" {
		e.WaitingSince = time.Time{}
	}
	t := now()
	if e.WaitingOn != "" && e.WaitingSince.IsZero() {
		e.WaitingSince = t
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	k := activityKey{e.AgentID, e.TaskID}
	if old, ok := a.active[k]; ok {
		e.CreatedAt, e.HLC = old.e.CreatedAt, old.e.HLC
		old.e = e
		return a.usage(e.AgentID, lim), nil
	}
	if lim.MaxActive > 0 && len(a.active) >= lim.MaxActive {
		return a.usage(e.AgentID, lim), &store.ActivityFullError{AgentID: e.AgentID, Limit: lim.MaxActive}
	}
	if lim.MaxPerAgent > 0 && a.perAgent[e.AgentID] >= lim.MaxPerAgent {
		return a.usage(e.AgentID, lim), &store.ActivityFullError{AgentID: e.AgentID, PerAgent: true, Limit: lim.MaxPerAgent}
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = t
	}
	a.active[k] = &activityRow{seq: a.nextSeq(), e: e}
	a.perAgent[e.AgentID]++
	return a.usage(e.AgentID, lim), nil
}

// remove deletes an active entry; a.mu is held.
func (a *activityState) remove(k activityKey) {
	delete(a.active, k)
	if a.perAgent[k.agentID]--; a.perAgent[k.agentID] <= 0 {
		delete(a.perAgent, k.agentID)
	}
}

// Complete implements store.ActivityBuffer.
func (a *activityState) Complete(ctx context.Context, agentID, taskID string, status store.ActivityStatus) (store.ActivityEntry, error) {
	if err := ctx.Err(); err != nil {
		return store.ActivityEntry{}, err
	}
	if err := cmp.Or(store.ValidateActivityKey(agentID, taskID), store.ValidateActivityCompletion(status)); err != nil {
		return store.ActivityEntry{}, fmt.Errorf("memory: complete activity %s/%s: %w", agentID, taskID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := activityKey{agentID, taskID}
	row, ok := a.active[k]
	if !ok {
		return store.ActivityEntry{}, fmt.Errorf("memory: complete activity %s/%s: %w", agentID, taskID, store.ErrNotFound)
	}
	a.remove(k)
	e := row.e
	e.Status = status
	e.CompletedAt = now()
	h := append(a.history[agentID], activityRow{seq: a.nextSeq(), e: e})
	if n := len(h) - store.ActivityHistoryPerAgent; n > 0 {
		h = slices.Delete(h, 0, n)
	}
	a.history[agentID] = h
	return e, nil
}

// SetWaitingOn implements store.ActivityBuffer.
func (a *activityState) SetWaitingOn(ctx context.Context, agentID, taskID, waitingOn string) (store.ActivityEntry, error) {
	if err := ctx.Err(); err != nil {
		return store.ActivityEntry{}, err
	}
	if err := cmp.Or(store.ValidateActivityKey(agentID, taskID), store.ValidateActivityText("waiting_on", waitingOn)); err != nil {
		return store.ActivityEntry{}, fmt.Errorf("memory: set waiting_on of %s/%s: %w", agentID, taskID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	row, ok := a.active[activityKey{agentID, taskID}]
	if !ok {
		return store.ActivityEntry{}, fmt.Errorf("memory: set waiting_on of %s/%s: %w", agentID, taskID, store.ErrNotFound)
	}
	switch {
	case waitingOn == "":
		row.e.WaitingOn, row.e.WaitingSince = "", time.Time{}
	case waitingOn != row.e.WaitingOn:
		row.e.WaitingOn, row.e.WaitingSince = waitingOn, now()
	}
	return row.e, nil
}

// List implements store.ActivityBuffer.
func (a *activityState) List(ctx context.Context, f store.ActivityFilter) ([]store.ActivityEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := store.ValidateActivityFilter(f); err != nil {
		return nil, fmt.Errorf("memory: list activity: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultActivityListLimit
	}
	a.mu.Lock()
	var rows []activityRow
	for _, r := range a.active {
		e := &r.e
		if activityMatches(f, e) {
			rows = append(rows, *r)
		}
	}
	a.mu.Unlock()
	slices.SortFunc(rows, func(x, y activityRow) int {
		return cmp.Or(x.e.CreatedAt.Compare(y.e.CreatedAt), cmp.Compare(x.seq, y.seq))
	})
	if len(rows) > limit {
		rows = rows[:limit]
	}
	return entriesOf(rows), nil
}

// activityMatches reports whether e passes every field f sets, for the active list and the
// history alike.
func activityMatches(f store.ActivityFilter, e *store.ActivityEntry) bool {
	return (f.AgentID == "" || e.AgentID == f.AgentID) && (f.RepoID == "" || e.RepoID == f.RepoID) &&
		(f.WorktreeID == "" || e.WorktreeID == f.WorktreeID) && (f.TaskID == "" || e.TaskID == f.TaskID)
}

// History implements store.ActivityBuffer.
func (a *activityState) History(ctx context.Context, f store.ActivityFilter) ([]store.ActivityEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := store.ValidateActivityFilter(f); err != nil {
		return nil, fmt.Errorf("memory: activity history: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultActivityListLimit
	}
	a.mu.Lock()
	var rows []activityRow
	for agentID, h := range a.history {
		if f.AgentID != "" && agentID != f.AgentID {
			continue
		}
		for _, r := range h {
			e := &r.e
			if activityMatches(f, e) {
				rows = append(rows, r)
			}
		}
	}
	a.mu.Unlock()
	slices.SortFunc(rows, func(x, y activityRow) int { return cmp.Compare(y.seq, x.seq) })
	if len(rows) > limit {
		rows = rows[:limit]
	}
	return entriesOf(rows), nil
}

// Purge implements store.ActivityBuffer.
func (a *activityState) Purge(ctx context.Context, agentID string, taskIDs []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if agentID == "" {
		return 0, fmt.Errorf("memory: purge activity: %w: agent_id is required", store.ErrInvalidActivity)
	}
	if err := store.ValidateActivityKey(agentID, taskIDs...); err != nil {
		return 0, fmt.Errorf("memory: purge activity of %s: %w", agentID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, id := range taskIDs {
		k := activityKey{agentID, id}
		if _, ok := a.active[k]; ok {
			a.remove(k)
			n++
		}
	}
	return n, nil
}

// Usage implements store.ActivityBuffer.
func (a *activityState) Usage(ctx context.Context, agentID string, lim store.ActivityLimits) (store.ActivityUsage, error) {
	lim = lim.Effective()
	if err := ctx.Err(); err != nil {
		return store.ActivityUsage{Limits: lim}, err
	}
	if err := store.ValidateActivityKey(agentID); err != nil {
		return store.ActivityUsage{Limits: lim}, fmt.Errorf("memory: activity usage of %s: %w", agentID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.usage(agentID, lim), nil
}

func entriesOf(rows []activityRow) []store.ActivityEntry {
	if len(rows) == 0 {
		return nil
	}
	out := make([]store.ActivityEntry, len(rows))
	for i, r := range rows {
		out[i] = r.e
	}
	return out
}
