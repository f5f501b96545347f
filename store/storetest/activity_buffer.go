package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// RunActivity runs the conformance suite of the activity buffer (§10, §10.1) as subtests of t.
// newStore must return a fresh, empty store and arrange (with t.Cleanup) for it to be closed.
func RunActivity(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutList", func(t *testing.T) { runActivityPutList(t, newStore) })
	t.Run("Validation", func(t *testing.T) { runActivityValidation(t, newStore) })
	t.Run("Replace", func(t *testing.T) { runActivityReplace(t, newStore) })
	t.Run("PerAgentLimit", func(t *testing.T) { runActivityPerAgentLimit(t, newStore) })
	t.Run("TotalLimit", func(t *testing.T) { runActivityTotalLimit(t, newStore) })
	t.Run("DisabledLimits", func(t *testing.T) { runActivityDisabledLimits(t, newStore) })
	t.Run("Usage", func(t *testing.T) { runActivityUsage(t, newStore) })
	t.Run("ConcurrentPuts", func(t *testing.T) { runActivityConcurrentPuts(t, newStore) })
	t.Run("Filters", func(t *testing.T) { runActivityFilters(t, newStore) })
	t.Run("Complete", func(t *testing.T) { runActivityComplete(t, newStore) })
	t.Run("CompleteReconciled", func(t *testing.T) { runActivityCompleteReconciled(t, newStore) })
	t.Run("ConcurrentComplete", func(t *testing.T) { runActivityConcurrentComplete(t, newStore) })
	t.Run("HistoryEviction", func(t *testing.T) { runActivityHistoryEviction(t, newStore) })
	t.Run("Purge", func(t *testing.T) { runActivityPurge(t, newStore) })
	t.Run("WaitingOn", func(t *testing.T) { runActivityWaitingOn(t, newStore) })
	t.Run("HLC", func(t *testing.T) { runActivityHLC(t, newStore) })
}

// runActivityHLC checks that an entry's HLC (§4) is stored, kept by a replacing Put like
// CreatedAt, and carried into the history.
func runActivityHLC(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	e := ActivityEntry("alice", "t1")
	e.HLC = "0001725552000000.000001.node-a"
	actPut(t, ab, e, store.ActivityLimits{})
	e.HLC = "0001725552000009.000000.node-b"
	e.Description = "replaced"
	actPut(t, ab, e, store.ActivityLimits{})
	got := actList(t, ab, store.ActivityFilter{AgentID: "alice"})
	require.Len(t, got, 1)
	require.Equal(t, "replaced", got[0].Description)
	require.Equal(t, "0001725552000000.000001.node-a", got[0].HLC, "a replacement keeps the HLC")
	done, err := ab.Complete(t.Context(), "alice", "t1", store.ActivityCompleted)
	require.NoError(t, err)
	require.Equal(t, "0001725552000000.000001.node-a", done.HLC)
	hist, err := ab.History(t.Context(), store.ActivityFilter{AgentID: "alice"})
	require.NoError(t, err)
	require.Len(t, hist, 1)
	require.Equal(t, "0001725552000000.000001.node-a", hist[0].HLC)
}

// activityBuffer returns the activity buffer of a fresh store.
func activityBuffer(t *testing.T, newStore func(t *testing.T) store.Store) store.ActivityBuffer {
	t.Helper()
	return newStore(t).ActivityBuffer()
}

// ActivityEntry returns a populated active entry for tests.
func ActivityEntry(agentID, taskID string) store.ActivityEntry {
	return store.ActivityEntry{
		AgentID: agentID, TaskID: taskID, RepoID: "repo-1", WorktreeID: "wt-1", Branch: "main",
		Description: "refactor the parser of " + taskID,
	}
}

func actPut(t *testing.T, ab store.ActivityBuffer, e store.ActivityEntry, lim store.ActivityLimits) store.ActivityUsage {
	t.Helper()
	u, err := ab.Put(t.Context(), e, lim)
	require.NoError(t, err, "put %s/%s", e.AgentID, e.TaskID)
	return u
}

func actList(t *testing.T, ab store.ActivityBuffer, f store.ActivityFilter) []store.ActivityEntry {
	t.Helper()
	es, err := ab.List(t.Context(), f)
	require.NoError(t, err)
	return es
}

func actHistory(t *testing.T, ab store.ActivityBuffer, agentID string, limit int) []store.ActivityEntry {
	t.Helper()
	es, err := ab.History(t.Context(), store.ActivityFilter{AgentID: agentID, Limit: limit})
	require.NoError(t, err)
	return es
}

func actUsage(t *testing.T, ab store.ActivityBuffer, agentID string, lim store.ActivityLimits) store.ActivityUsage {
	t.Helper()
	u, err := ab.Usage(t.Context(), agentID, lim)
	require.NoError(t, err)
	return u
}

// actKeys renders entries as "agent/task" for order-sensitive comparisons.
func actKeys(es []store.ActivityEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.AgentID + "/" + e.TaskID
	}
	return out
}

func actRequireRecent(t *testing.T, ts time.Time, what string) {
	t.Helper()
	require.False(t, ts.IsZero(), "%s is zero", what)
	require.Equal(t, time.UTC, ts.Location(), "%s is in UTC", what)
	require.WithinDuration(t, time.Now(), ts, time.Minute, what)
}

func actRequireFull(t *testing.T, err error, perAgent bool, limit int) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrActivityBufferFull)
	var full *store.ActivityFullError
	require.True(t, errors.As(err, &full), "the error is an *ActivityFullError: %v", err)
	require.Equal(t, perAgent, full.PerAgent, "per-agent limit: %v", err)
	require.Equal(t, limit, full.Limit)
}

func runActivityPutList(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RoundTrip", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		e := ActivityEntry("alice", "t1")
		// Status and CompletedAt are the store's business.
		e.Status, e.CompletedAt = store.ActivityFailed, time.Now()
		u := actPut(t, ab, e, store.ActivityLimits{})
		require.Equal(t, store.ActivityUsage{Active: 1, AgentActive: 1,
			Limits: store.ActivityLimits{MaxActive: store.DefaultActivityMaxActive, MaxPerAgent: store.DefaultActivityMaxPerAgent}}, u)
		require.Equal(t, store.ActivityLimits{MaxActive: 10000, MaxPerAgent: 100}, u.Limits, "§10.1 defaults")

		es := actList(t, ab, store.ActivityFilter{AgentID: "alice"})
		require.Len(t, es, 1)
		got := es[0]
		actRequireRecent(t, got.CreatedAt, "CreatedAt")
		require.Equal(t, store.ActivityActive, got.Status)
		require.True(t, got.CompletedAt.IsZero())
		require.True(t, got.WaitingSince.IsZero())
		want := ActivityEntry("alice", "t1")
		want.Status, want.CreatedAt = store.ActivityActive, got.CreatedAt
		require.Equal(t, want, got)
		require.Equal(t, es, actList(t, ab, store.ActivityFilter{}))
		require.Empty(t, actList(t, ab, store.ActivityFilter{AgentID: "bob"}))
		require.Empty(t, actHistory(t, ab, "alice", 0))
	})
	t.Run("CallerCreatedAt", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		zone := time.FixedZone("UTC+2", 2*60*60)
		at := time.Date(2025, 3, 4, 5, 6, 7, 123456789, zone)
		e := ActivityEntry("alice", "t1")
		e.CreatedAt = at
		actPut(t, ab, e, store.ActivityLimits{})
		es := actList(t, ab, store.ActivityFilter{})
		require.Len(t, es, 1)
		require.True(t, at.Truncate(time.Microsecond).Equal(es[0].CreatedAt), "CreatedAt %v", es[0].CreatedAt)
		require.Equal(t, time.UTC, es[0].CreatedAt.Location())
	})
	t.Run("Empty", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		require.Empty(t, actList(t, ab, store.ActivityFilter{}))
		require.Empty(t, actHistory(t, ab, "", 0))
		u := actUsage(t, ab, "alice", store.ActivityLimits{})
		require.Zero(t, u.Active)
		require.Zero(t, u.AgentActive)
	})
}

func runActivityValidation(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	words := func(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }

	ok := ActivityEntry("alice", "ok")
	ok.Description = words(store.MaxActivityDescriptionWords)
	require.Equal(t, 200, store.ActivityDescriptionWords(ok.Description))
	actPut(t, ab, ok, store.ActivityLimits{})

	for name, mutate := range map[string]func(*store.ActivityEntry){
		"NoAgent":        func(e *store.ActivityEntry) { e.AgentID = "" },
		"NoTask":         func(e *store.ActivityEntry) { e.TaskID = "" },
		"201Words":       func(e *store.ActivityEntry) { e.Description = words(201) },
		"201WordsSpaced": func(e *store.ActivityEntry) { e.Description = "\n" + strings.Repeat("w\t ", 201) },
		"TooManyBytes":   func(e *store.ActivityEntry) { e.Description = strings.Repeat("x", store.MaxActivityDescriptionBytes+1) },
		"BadUTF8":        func(e *store.ActivityEntry) { e.RepoID = "repo\xff" },
		"NUL":            func(e *store.ActivityEntry) { e.Branch = "ma\x00in" },
		"NULWaitingOn":   func(e *store.ActivityEntry) { e.WaitingOn = "m\x00" },
	} {
		t.Run(name, func(t *testing.T) {
			e := ActivityEntry("alice", "bad-"+name)
			mutate(&e)
			_, err := ab.Put(ctx, e, store.ActivityLimits{})
			require.ErrorIs(t, err, store.ErrInvalidActivity)
			require.NotErrorIs(t, err, store.ErrActivityBufferFull)
		})
	}
	require.Equal(t, []string{"alice/ok"}, actKeys(actList(t, ab, store.ActivityFilter{})), "rejected entries are not stored")

	t.Run("Operations", func(t *testing.T) {
		_, err := ab.Complete(ctx, "alice", "ok", store.ActivityActive)
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.Complete(ctx, "alice", "ok", "")
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.Complete(ctx, "alice", "ok\xff", store.ActivityCompleted)
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.SetWaitingOn(ctx, "alice", "ok", "m\x00")
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.Purge(ctx, "", []string{"ok"})
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.Purge(ctx, "alice", []string{"ok", "x\x00"})
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.List(ctx, store.ActivityFilter{RepoID: "\xff"})
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.History(ctx, store.ActivityFilter{AgentID: "\x00"})
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		_, err = ab.History(ctx, store.ActivityFilter{WorktreeID: "\xff"})
		require.ErrorIs(t, err, store.ErrInvalidActivity)
		// None of the refused operations changed anything.
		require.Equal(t, []string{"alice/ok"}, actKeys(actList(t, ab, store.ActivityFilter{})))
		require.Empty(t, actHistory(t, ab, "", 0))
	})
}

func runActivityReplace(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	lim := store.ActivityLimits{MaxActive: 2, MaxPerAgent: 1}
	actPut(t, ab, ActivityEntry("alice", "t1"), lim)
	first := actList(t, ab, store.ActivityFilter{})[0]
	actPut(t, ab, ActivityEntry("bob", "t1"), lim)

	// Both limits are reached; re-registering alice's task replaces it all the same.
	e := store.ActivityEntry{AgentID: "alice", TaskID: "t1", RepoID: "repo-2", Branch: "dev", Description: "second try",
		Scope: "repo:repo-2 path:src/**", JobKey: "job-1", CreatedAt: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	u := actPut(t, ab, e, lim)
	require.Equal(t, 2, u.Active)
	require.Equal(t, 1, u.AgentActive)

	es := actList(t, ab, store.ActivityFilter{AgentID: "alice"})
	require.Len(t, es, 1)
	want := e
	want.Status, want.CreatedAt = store.ActivityActive, first.CreatedAt
	require.Equal(t, want, es[0], "fields replaced, CreatedAt kept")
	require.Equal(t, 2, actUsage(t, ab, "alice", lim).Active)

	// Scope and job key travel into the history with the rest (§9.2 reads them).
	done, err := ab.Complete(t.Context(), "alice", "t1", store.ActivityCompleted)
	require.NoError(t, err)
	require.Equal(t, e.Scope, done.Scope)
	require.Equal(t, e.JobKey, done.JobKey)
}

func runActivityPerAgentLimit(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Configured", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		ctx := t.Context()
		lim := store.ActivityLimits{MaxPerAgent: 3}
		for i := range 3 {
			u := actPut(t, ab, ActivityEntry("alice", fmt.Sprint("t", i)), lim)
			require.Equal(t, i+1, u.AgentActive)
		}
		u, err := ab.Put(ctx, ActivityEntry("alice", "t3"), lim)
		actRequireFull(t, err, true, 3)
		require.Equal(t, store.ActivityUsage{Active: 3, AgentActive: 3,
			Limits: store.ActivityLimits{MaxActive: store.DefaultActivityMaxActive, MaxPerAgent: 3}}, u, "usage before the rejected Put")
		require.Len(t, actList(t, ab, store.ActivityFilter{AgentID: "alice"}), 3, "nothing dropped, nothing added")
		require.Empty(t, actList(t, ab, store.ActivityFilter{TaskID: "t3"}))

		// Other agents are not affected.
		u = actPut(t, ab, ActivityEntry("bob", "t3"), lim)
		require.Equal(t, 4, u.Active)
		require.Equal(t, 1, u.AgentActive)

		// Completing or purging one of alice's entries makes room for one more.
		_, err = ab.Complete(ctx, "alice", "t0", store.ActivityCompleted)
		require.NoError(t, err)
		actPut(t, ab, ActivityEntry("alice", "t3"), lim)
		_, err = ab.Put(ctx, ActivityEntry("alice", "t4"), lim)
		actRequireFull(t, err, true, 3)
		n, err := ab.Purge(ctx, "alice", []string{"t1"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		actPut(t, ab, ActivityEntry("alice", "t4"), lim)
	})
	t.Run("Default100", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		for i := range store.DefaultActivityMaxPerAgent {
			actPut(t, ab, ActivityEntry("alice", fmt.Sprint("t", i)), store.ActivityLimits{})
		}
		_, err := ab.Put(t.Context(), ActivityEntry("alice", "one-more"), store.ActivityLimits{})
		actRequireFull(t, err, true, 100)
		require.Equal(t, 100, actUsage(t, ab, "alice", store.ActivityLimits{}).AgentActive)
	})
}

func runActivityTotalLimit(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	lim := store.ActivityLimits{MaxActive: 5, MaxPerAgent: 5}
	for i := range 5 {
		u := actPut(t, ab, ActivityEntry(fmt.Sprint("agent", i), "t"), lim)
		require.Equal(t, i+1, u.Active)
	}
	u, err := ab.Put(ctx, ActivityEntry("late", "t"), lim)
	actRequireFull(t, err, false, 5)
	require.Equal(t, 5, u.Active)
	require.Zero(t, u.AgentActive)
	// An agent below its own limit is refused too, and the total is checked first.
	_, err = ab.Put(ctx, ActivityEntry("agent0", "t2"), store.ActivityLimits{MaxActive: 5, MaxPerAgent: 1})
	actRequireFull(t, err, false, 5)
	require.Empty(t, actList(t, ab, store.ActivityFilter{AgentID: "late"}))
	require.Len(t, actList(t, ab, store.ActivityFilter{}), 5, "no entry was dropped to make room")

	// Room comes back when entries leave.
	_, err = ab.Complete(ctx, "agent0", "t", store.ActivityFailed)
	require.NoError(t, err)
	actPut(t, ab, ActivityEntry("late", "t"), lim)
	_, err = ab.Put(ctx, ActivityEntry("later", "t"), lim)
	actRequireFull(t, err, false, 5)

	// A higher limit on the next call admits more: limits are per call, not stored.
	actPut(t, ab, ActivityEntry("later", "t"), store.ActivityLimits{MaxActive: 6})
	require.Equal(t, 6, actUsage(t, ab, "", store.ActivityLimits{}).Active)
}

func runActivityDisabledLimits(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	lim := store.ActivityLimits{MaxActive: -1, MaxPerAgent: -1}
	n := store.DefaultActivityMaxPerAgent + 5
	var u store.ActivityUsage
	for i := range n {
		u = actPut(t, ab, ActivityEntry("alice", fmt.Sprint("t", i)), lim)
	}
	require.Equal(t, store.ActivityUsage{Active: n, AgentActive: n, Limits: lim}, u)
	require.Zero(t, u.Utilization())
	require.Zero(t, u.AgentUtilization())
	require.False(t, u.Warn())
	// Under the default limits the same agent is now over its limit.
	_, err := ab.Put(t.Context(), ActivityEntry("alice", "more"), store.ActivityLimits{})
	actRequireFull(t, err, true, store.DefaultActivityMaxPerAgent)
}

func runActivityUsage(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	lim := store.ActivityLimits{MaxActive: 10, MaxPerAgent: 5}
	var u store.ActivityUsage
	for i := range 4 {
		u = actPut(t, ab, ActivityEntry("alice", fmt.Sprint("t", i)), lim)
	}
	require.InDelta(t, 0.4, u.Utilization(), 1e-9)
	require.InDelta(t, 0.8, u.AgentUtilization(), 1e-9)
	require.False(t, u.Warn(), "80% is not past 80%")
	u = actPut(t, ab, ActivityEntry("alice", "t4"), lim)
	require.InDelta(t, 1.0, u.AgentUtilization(), 1e-9)
	require.True(t, u.Warn(), "the agent is past 80% of its limit")

	for i := range 3 {
		u = actPut(t, ab, ActivityEntry("bob", fmt.Sprint("t", i)), lim)
	}
	require.Equal(t, 8, u.Active)
	require.Equal(t, 3, u.AgentActive)
	require.False(t, u.Warn(), "8 of 10 in total, 3 of 5 for bob")
	u = actPut(t, ab, ActivityEntry("carol", "t0"), lim)
	require.InDelta(t, 0.9, u.Utilization(), 1e-9)
	require.True(t, u.Warn(), "past 80% in total")

	got := actUsage(t, ab, "bob", lim)
	require.Equal(t, store.ActivityUsage{Active: 9, AgentActive: 3, Limits: lim}, got)
	got = actUsage(t, ab, "nobody", store.ActivityLimits{})
	require.Equal(t, store.ActivityUsage{Active: 9, Limits: store.ActivityLimits{}.Effective()}, got)
}

func runActivityConcurrentPuts(t *testing.T, newStore func(t *testing.T) store.Store) {
	run := func(t *testing.T, ab store.ActivityBuffer, n int, lim store.ActivityLimits, agent func(i int) string) int {
		t.Helper()
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			oks  int
			errs []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ab.Put(t.Context(), ActivityEntry(agent(i), fmt.Sprint("t", i)), lim)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					oks++
				case !errors.Is(err, store.ErrActivityBufferFull):
					errs = append(errs, err)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		return oks
	}
	t.Run("Total", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		const n, limit = 40, 7
		lim := store.ActivityLimits{MaxActive: limit}
		oks := run(t, ab, n, lim, func(i int) string { return fmt.Sprint("agent", i) })
		require.Equal(t, limit, oks, "exactly the limit's worth of Puts succeed")
		require.Equal(t, limit, actUsage(t, ab, "", lim).Active)
		require.Len(t, actList(t, ab, store.ActivityFilter{}), limit)
	})
	t.Run("PerAgent", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		const n, limit = 30, 5
		lim := store.ActivityLimits{MaxPerAgent: limit}
		oks := run(t, ab, n, lim, func(i int) string { return []string{"alice", "bob"}[i%2] })
		require.Equal(t, 2*limit, oks)
		require.Equal(t, limit, actUsage(t, ab, "alice", lim).AgentActive)
		require.Equal(t, limit, actUsage(t, ab, "bob", lim).AgentActive)
	})
}

func runActivityFilters(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	put := func(agent, task, repo, wt string, at time.Time) {
		e := ActivityEntry(agent, task)
		e.RepoID, e.WorktreeID, e.CreatedAt = repo, wt, at
		actPut(t, ab, e, store.ActivityLimits{})
	}
	// Put out of time order; ties keep creation order.
	put("alice", "t1", "r1", "w1", base.Add(2*time.Second))
	put("bob", "t1", "r1", "w2", base.Add(time.Second))
	put("alice", "t2", "r2", "w3", base.Add(2*time.Second))
	put("carol", "t3", "r2", "w1", base)
	put("alice", "t3", "r1", "w1", base.Add(3*time.Second))

	for _, tc := range []struct {
		name string
		f    store.ActivityFilter
		want []string
	}{
		{"All", store.ActivityFilter{}, []string{"carol/t3", "bob/t1", "alice/t1", "alice/t2", "alice/t3"}},
		{"Agent", store.ActivityFilter{AgentID: "alice"}, []string{"alice/t1", "alice/t2", "alice/t3"}},
		{"Repo", store.ActivityFilter{RepoID: "r2"}, []string{"carol/t3", "alice/t2"}},
		{"Worktree", store.ActivityFilter{WorktreeID: "w1"}, []string{"carol/t3", "alice/t1", "alice/t3"}},
		{"Task", store.ActivityFilter{TaskID: "t1"}, []string{"bob/t1", "alice/t1"}},
		{"AgentRepo", store.ActivityFilter{AgentID: "alice", RepoID: "r1"}, []string{"alice/t1", "alice/t3"}},
		{"AllFour", store.ActivityFilter{AgentID: "alice", RepoID: "r1", WorktreeID: "w1", TaskID: "t3"}, []string{"alice/t3"}},
		{"NoMatch", store.ActivityFilter{AgentID: "bob", RepoID: "r2"}, nil},
		{"UnknownAgent", store.ActivityFilter{AgentID: "dave"}, nil},
		{"Limit", store.ActivityFilter{Limit: 2}, []string{"carol/t3", "bob/t1"}},
		{"AgentLimit", store.ActivityFilter{AgentID: "alice", Limit: 1}, []string{"alice/t1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := actList(t, ab, tc.f)
			if tc.want == nil {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, actKeys(got))
		})
	}

	// The short history takes the same filters (§10), most recently completed first.
	for _, k := range [][2]string{{"carol", "t3"}, {"bob", "t1"}, {"alice", "t1"}, {"alice", "t2"}, {"alice", "t3"}} {
		_, err := ab.Complete(t.Context(), k[0], k[1], store.ActivityCompleted)
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		name string
		f    store.ActivityFilter
		want []string
	}{
		{"HistoryAll", store.ActivityFilter{}, []string{"alice/t3", "alice/t2", "alice/t1", "bob/t1", "carol/t3"}},
		{"HistoryAgent", store.ActivityFilter{AgentID: "bob"}, []string{"bob/t1"}},
		{"HistoryRepo", store.ActivityFilter{RepoID: "r2"}, []string{"alice/t2", "carol/t3"}},
		{"HistoryWorktree", store.ActivityFilter{WorktreeID: "w1"}, []string{"alice/t3", "alice/t1", "carol/t3"}},
		{"HistoryTask", store.ActivityFilter{TaskID: "t1"}, []string{"alice/t1", "bob/t1"}},
		{"HistoryAllFour", store.ActivityFilter{AgentID: "alice", RepoID: "r1", WorktreeID: "w1", TaskID: "t3"}, []string{"alice/t3"}},
		{"HistoryNoMatch", store.ActivityFilter{AgentID: "bob", RepoID: "r2"}, nil},
		{"HistoryLimit", store.ActivityFilter{Limit: 2}, []string{"alice/t3", "alice/t2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ab.History(t.Context(), tc.f)
			require.NoError(t, err)
			if tc.want == nil {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, actKeys(got))
		})
	}
}

func runActivityComplete(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	e := ActivityEntry("alice", "t1")
	e.WaitingOn = "msg-9"
	actPut(t, ab, e, store.ActivityLimits{})
	actPut(t, ab, ActivityEntry("alice", "t2"), store.ActivityLimits{})
	active := actList(t, ab, store.ActivityFilter{TaskID: "t1"})[0]

	done, err := ab.Complete(ctx, "alice", "t1", store.ActivityCompleted)
	require.NoError(t, err)
	actRequireRecent(t, done.CompletedAt, "CompletedAt")
	require.False(t, done.CompletedAt.Before(active.CreatedAt))
	want := active
	want.Status, want.CompletedAt = store.ActivityCompleted, done.CompletedAt
	require.Equal(t, want, done, "the history entry keeps every field")
	require.Equal(t, []string{"alice/t2"}, actKeys(actList(t, ab, store.ActivityFilter{})), "removed from the active buffer")
	require.Equal(t, []store.ActivityEntry{done}, actHistory(t, ab, "alice", 0))
	require.Equal(t, 1, actUsage(t, ab, "alice", store.ActivityLimits{}).AgentActive)

	_, err = ab.Complete(ctx, "alice", "t1", store.ActivityCompleted)
	require.ErrorIs(t, err, store.ErrNotFound, "already completed")
	_, err = ab.Complete(ctx, "bob", "t2", store.ActivityCompleted)
	require.ErrorIs(t, err, store.ErrNotFound, "another agent's task")
	_, err = ab.Complete(ctx, "alice", "t2", "done")
	require.ErrorIs(t, err, store.ErrInvalidActivity)
	require.Len(t, actList(t, ab, store.ActivityFilter{}), 1, "a refused completion leaves the entry active")

	failed, err := ab.Complete(ctx, "alice", "t2", store.ActivityFailed)
	require.NoError(t, err)
	require.Equal(t, store.ActivityFailed, failed.Status)
	require.Equal(t, []string{"alice/t2", "alice/t1"}, actKeys(actHistory(t, ab, "alice", 0)), "most recent first")
	require.Empty(t, actList(t, ab, store.ActivityFilter{}))

	// The task can be registered again, and completes into the history once more.
	actPut(t, ab, ActivityEntry("alice", "t1"), store.ActivityLimits{})
	_, err = ab.Complete(ctx, "alice", "t1", store.ActivityCompleted)
	require.NoError(t, err)
	h := actHistory(t, ab, "alice", 0)
	require.Equal(t, []string{"alice/t1", "alice/t2", "alice/t1"}, actKeys(h))
	require.Empty(t, h[0].WaitingOn)
	require.Equal(t, "msg-9", h[2].WaitingOn)
}

// runActivityCompleteReconciled: the statuses the scheduler's reconciliation records (§10:
// a cancelled task, and one of unknown state) enter the history like the others.
func runActivityCompleteReconciled(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	for _, task := range []string{"t1", "t2", "t3"} {
		actPut(t, ab, ActivityEntry("alice", task), store.ActivityLimits{})
	}
	cancelled, err := ab.Complete(ctx, "alice", "t1", store.ActivityCancelled)
	require.NoError(t, err)
	require.Equal(t, store.ActivityCancelled, cancelled.Status)
	unknown, err := ab.Complete(ctx, "alice", "t2", store.ActivityUnknown)
	require.NoError(t, err)
	require.Equal(t, store.ActivityUnknown, unknown.Status)
	_, err = ab.Complete(ctx, "alice", "t3", store.ActivityActive)
	require.ErrorIs(t, err, store.ErrInvalidActivity, "active is no completion status")
	h := actHistory(t, ab, "alice", 0)
	require.Equal(t, []store.ActivityEntry{unknown, cancelled}, h, "most recent first, with their statuses")
	require.Equal(t, []string{"alice/t3"}, actKeys(actList(t, ab, store.ActivityFilter{})))
}

// runActivityConcurrentComplete: of concurrent Completes of one entry exactly one succeeds
// and the others see ErrNotFound, so that several reconcilers sweeping at once (§10) close
// and audit each entry once; the history holds it once.
func runActivityConcurrentComplete(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	const entries, racers = 5, 8
	for i := range entries {
		actPut(t, ab, ActivityEntry("alice", fmt.Sprint("t", i)), store.ActivityLimits{})
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      = map[string]int{}
		failures []error
	)
	for r := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := []store.ActivityStatus{store.ActivityFailed, store.ActivityUnknown}[r%2]
			for i := range entries {
				task := fmt.Sprint("t", i)
				_, err := ab.Complete(ctx, "alice", task, status)
				mu.Lock()
				switch {
				case err == nil:
					won[task]++
				case !errors.Is(err, store.ErrNotFound):
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, failures)
	for i := range entries {
		require.Equal(t, 1, won[fmt.Sprint("t", i)], "exactly one Complete of t%d succeeds", i)
	}
	require.Len(t, actHistory(t, ab, "alice", 0), entries, "each entry enters the history once")
	require.Empty(t, actList(t, ab, store.ActivityFilter{}))
}

func runActivityHistoryEviction(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	complete := func(agent, task string) {
		t.Helper()
		actPut(t, ab, ActivityEntry(agent, task), store.ActivityLimits{})
		_, err := ab.Complete(ctx, agent, task, store.ActivityCompleted)
		require.NoError(t, err)
	}
	const n = store.ActivityHistoryPerAgent + 5
	complete("bob", "b0")
	for i := range n {
		complete("alice", fmt.Sprint("t", i))
	}
	complete("bob", "b1")

	h := actHistory(t, ab, "alice", 0)
	require.Len(t, h, store.ActivityHistoryPerAgent, "count-based eviction")
	for i, e := range h {
		require.Equal(t, fmt.Sprint("t", n-1-i), e.TaskID, "newest first; the oldest five were evicted")
	}
	require.Equal(t, []string{"bob/b1", "bob/b0"}, actKeys(actHistory(t, ab, "bob", 0)), "other agents keep theirs")
	require.Empty(t, actHistory(t, ab, "carol", 0))

	require.Equal(t, []string{"alice/t54", "alice/t53"}, actKeys(actHistory(t, ab, "alice", 2)))
	all := actHistory(t, ab, "", 0)
	require.Len(t, all, store.ActivityHistoryPerAgent+2)
	require.Equal(t, []string{"bob/b1", "alice/t54", "alice/t53"}, actKeys(all[:3]), "every agent's, most recent first")
	require.Equal(t, "bob/b0", actKeys(all)[len(all)-1])
	require.Equal(t, []string{"bob/b1"}, actKeys(actHistory(t, ab, "", 1)))
}

func runActivityPurge(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	for _, k := range []string{"alice/t1", "alice/t2", "alice/t3", "bob/t1"} {
		agent, task, _ := strings.Cut(k, "/")
		actPut(t, ab, ActivityEntry(agent, task), store.ActivityLimits{})
	}
	n, err := ab.Purge(ctx, "alice", []string{"t1", "t2", "unknown", "t1"})
	require.NoError(t, err)
	require.Equal(t, 2, n, "unknown and repeated task IDs count nothing")
	require.Equal(t, []string{"alice/t3", "bob/t1"}, actKeys(actList(t, ab, store.ActivityFilter{})))
	require.Empty(t, actHistory(t, ab, "", 0), "purged entries do not enter the history")
	require.Equal(t, 1, actUsage(t, ab, "alice", store.ActivityLimits{}).AgentActive)

	n, err = ab.Purge(ctx, "alice", []string{"t1"})
	require.NoError(t, err)
	require.Zero(t, n, "purging again purges nothing")
	n, err = ab.Purge(ctx, "alice", nil)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = ab.Purge(ctx, "carol", []string{"t1"})
	require.NoError(t, err)
	require.Zero(t, n, "another agent's task is not purged")
	n, err = ab.Purge(ctx, "bob", []string{"t1"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"alice/t3"}, actKeys(actList(t, ab, store.ActivityFilter{})))

	_, err = ab.Complete(ctx, "bob", "t1", store.ActivityCompleted)
	require.ErrorIs(t, err, store.ErrNotFound, "a purged entry cannot complete")
}

func runActivityWaitingOn(t *testing.T, newStore func(t *testing.T) store.Store) {
	ab := activityBuffer(t, newStore)
	ctx := t.Context()
	actPut(t, ab, ActivityEntry("alice", "t1"), store.ActivityLimits{})

	e, err := ab.SetWaitingOn(ctx, "alice", "t1", "msg-1")
	require.NoError(t, err)
	require.Equal(t, "msg-1", e.WaitingOn)
	actRequireRecent(t, e.WaitingSince, "WaitingSince")
	require.Equal(t, store.ActivityActive, e.Status)
	require.Equal(t, []store.ActivityEntry{e}, actList(t, ab, store.ActivityFilter{}))

	again, err := ab.SetWaitingOn(ctx, "alice", "t1", "msg-1")
	require.NoError(t, err)
	require.True(t, e.WaitingSince.Equal(again.WaitingSince), "same value keeps WaitingSince")

	other, err := ab.SetWaitingOn(ctx, "alice", "t1", "corr-2")
	require.NoError(t, err)
	require.Equal(t, "corr-2", other.WaitingOn)
	require.False(t, other.WaitingSince.Before(e.WaitingSince))

	cleared, err := ab.SetWaitingOn(ctx, "alice", "t1", "")
	require.NoError(t, err)
	require.Empty(t, cleared.WaitingOn)
	require.True(t, cleared.WaitingSince.IsZero())
	require.Equal(t, []store.ActivityEntry{cleared}, actList(t, ab, store.ActivityFilter{}))

	_, err = ab.SetWaitingOn(ctx, "alice", "nope", "msg-1")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = ab.SetWaitingOn(ctx, "bob", "t1", "msg-1")
	require.ErrorIs(t, err, store.ErrNotFound)

	t.Run("Put", func(t *testing.T) {
		ab := activityBuffer(t, newStore)
		since := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
		a := ActivityEntry("alice", "given")
		a.WaitingOn, a.WaitingSince = "msg-a", since
		b := ActivityEntry("alice", "stamped")
		b.WaitingOn = "msg-b"
		c := ActivityEntry("alice", "dropped")
		c.WaitingSince = since
		for _, e := range []store.ActivityEntry{a, b, c} {
			actPut(t, ab, e, store.ActivityLimits{})
		}
		es := actList(t, ab, store.ActivityFilter{})
		require.Equal(t, []string{"alice/given", "alice/stamped", "alice/dropped"}, actKeys(es))
		require.True(t, since.Equal(es[0].WaitingSince), "a given WaitingSince is kept")
		actRequireRecent(t, es[1].WaitingSince, "stamped WaitingSince")
		require.True(t, es[2].WaitingSince.IsZero(), "no WaitingSince without WaitingOn")
	})
}
