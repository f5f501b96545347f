package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests ToolCalls: calls recorded once, frames numbered without gaps even when
// written concurrently, the first final frame winning, nothing appended after it, and reads
// resuming after a frame number (§18.2, §18.6).

func runToolCalls(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CreateOnce", func(t *testing.T) {
		st := newStore(t)
		c := st.ToolCalls()
		ctx := t.Context()
		start := store.OutboxEntry{ID: "h-start-c1", Kind: "tool.start", WorkflowID: "tool/c1", Payload: []byte(`{}`)}
		rec, created, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: "c1", Caller: "agent-a", ProviderID: "builtin", ToolName: "echo"}, start)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, "agent-a", rec.Caller)
		again, created, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: "c1", Caller: "agent-b"},
			store.OutboxEntry{ID: "h-start-c1-again", Kind: "tool.start", WorkflowID: "tool/c1", Payload: []byte(`{}`)})
		require.NoError(t, err)
		require.False(t, created, "a known call_id is not created again")
		pending, err := st.Outbox().Pending(ctx, 10)
		require.NoError(t, err)
		require.Len(t, pending, 1, "the call's start is written with it, and only once")
		require.Equal(t, "h-start-c1", pending[0].ID)
		require.Equal(t, "agent-a", again.Caller, "the first owner stays")
		require.Equal(t, "echo", again.ToolName)
		_, err = c.GetCall(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = c.AppendFrame(ctx, "nope", "text/plain", []byte("x"))
		require.ErrorIs(t, err, store.ErrNotFound)
		_, _, err = c.Finish(ctx, "nope", "text/plain", nil, nil)
		require.ErrorIs(t, err, store.ErrNotFound)
		fs, err := c.Frames(ctx, "nope", 0, 0)
		require.NoError(t, err)
		require.NotNil(t, fs)
		require.Empty(t, fs)
	})

	t.Run("OpenCallsOfAnAgent", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		for _, r := range []store.ToolCallRecord{
			{CallID: "o1", Caller: "agent:a", ProviderID: "builtin", ToolName: "echo"},
			{CallID: "o2", Caller: "agent:b", ProviderID: "a", ToolName: "hold"},
			{CallID: "o3", Caller: "agent:a", ProviderID: "a", ToolName: "hold"},
			{CallID: "o4", Caller: "agent:a", ProviderID: "builtin", ToolName: "echo"},
			{CallID: "o5", Caller: "agent:b", ProviderID: "builtin", ToolName: "echo"},
			{CallID: "o6", Caller: "", ProviderID: "", ToolName: "echo"},
		} {
			_, _, err := c.CreateCall(ctx, r)
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond) // created_at orders them
		}
		_, _, err := c.Finish(ctx, "o4", "application/json", nil, func(uint64, uint64) []byte { return []byte(`{}`) })
		require.NoError(t, err)
		ids := func(rs []store.ToolCallRecord) []string {
			out := []string{}
			for _, r := range rs {
				out = append(out, r.CallID)
			}
			return out
		}
		got, err := c.OpenCalls(ctx, "agent:a", "a")
		require.NoError(t, err)
		require.Equal(t, []string{"o1", "o2", "o3"}, ids(got), "made by a or provided by a, once each, without the finished o4")
		require.Equal(t, "agent:b", got[1].Caller)
		got, err = c.OpenCalls(ctx, "agent:b", "")
		require.NoError(t, err)
		require.Equal(t, []string{"o2", "o5"}, ids(got))
		got, err = c.OpenCalls(ctx, "", "")
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Empty(t, got, "empty matches nothing, not the calls without caller or provider")
	})

	t.Run("ListCallsFiltered", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		for _, r := range []store.ToolCallRecord{
			{CallID: "l1", Caller: "agent:a", ProviderID: "builtin", ToolName: "echo"},
			{CallID: "l2", Caller: "agent:b", ProviderID: "builtin", ToolName: "echo"},
			{CallID: "l3", Caller: "agent:a", ProviderID: "mcp-fs", ToolName: "read"},
			{CallID: "l4", Caller: "operator:ops", ProviderID: "builtin", ToolName: "process.run"},
		} {
			_, _, err := c.CreateCall(ctx, r)
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond) // created_at orders them
		}
		_, err := c.AppendFrame(ctx, "l1", "text/plain", []byte("hello"))
		require.NoError(t, err)
		_, _, err = c.Finish(ctx, "l1", "application/json", nil, func(uint64, uint64) []byte { return []byte(`{"status":"ok"}`) })
		require.NoError(t, err)
		ids := func(rs []store.ListedToolCall) []string {
			out := []string{}
			for _, r := range rs {
				out = append(out, r.CallID)
			}
			return out
		}
		all, err := c.ListCalls(ctx, store.ToolCallFilter{})
		require.NoError(t, err)
		require.Equal(t, []string{"l4", "l3", "l2", "l1"}, ids(all), "newest first")
		require.Equal(t, []byte(`{"status":"ok"}`), all[3].Summary, "an ended call carries its final frame's summary")
		require.True(t, all[3].Final)
		require.Equal(t, uint64(2), all[3].Frames)
		require.Equal(t, uint64(5), all[3].Bytes)
		require.Empty(t, all[0].Summary, "an open call has none")
		require.Equal(t, "operator:ops", all[0].Caller)
		require.Equal(t, "process.run", all[0].ToolName)
		for _, tc := range []struct {
			f    store.ToolCallFilter
			want []string
		}{
			{store.ToolCallFilter{Caller: "agent:a"}, []string{"l3", "l1"}},
			{store.ToolCallFilter{ProviderID: "builtin", ToolName: "echo"}, []string{"l2", "l1"}},
			{store.ToolCallFilter{Phase: store.OpenToolCall}, []string{"l4", "l3", "l2"}},
			{store.ToolCallFilter{Phase: store.FinalToolCall}, []string{"l1"}},
			{store.ToolCallFilter{Caller: "agent:a", Phase: store.OpenToolCall}, []string{"l3"}},
			{store.ToolCallFilter{Limit: 2}, []string{"l4", "l3"}},
			{store.ToolCallFilter{Caller: "agent:c"}, []string{}},
		} {
			got, err := c.ListCalls(ctx, tc.f)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, tc.want, ids(got), "%+v", tc.f)
		}
	})

	t.Run("FramesAndFinal", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		_, _, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: "c2", Caller: "a"})
		require.NoError(t, err)
		f1, err := c.AppendFrame(ctx, "c2", "text/plain", []byte("hello"))
		require.NoError(t, err)
		require.Equal(t, uint64(1), f1.FrameNo)
		f2, err := c.AppendFrame(ctx, "c2", "text/plain", []byte("world!"))
		require.NoError(t, err)
		require.Equal(t, uint64(2), f2.FrameNo)

		var sawFrames, sawBytes uint64
		fin, created, err := c.Finish(ctx, "c2", "application/json", []byte(`{"ok":true}`), func(frames, bytes uint64) []byte {
			sawFrames, sawBytes = frames, bytes
			return []byte(fmt.Sprintf(`{"frames":%d}`, frames))
		})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, uint64(2), sawFrames, "the summary sees the frames before the final one")
		require.Equal(t, uint64(11), sawBytes)
		require.Equal(t, uint64(3), fin.FrameNo)
		require.True(t, fin.Final)
		require.JSONEq(t, `{"frames":2}`, string(fin.Summary))

		// The first final frame wins: a second Finish stores nothing and answers the first.
		again, created, err := c.Finish(ctx, "c2", "text/plain", []byte("cancelled"), func(uint64, uint64) []byte { return []byte("{}") })
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, fin.FrameNo, again.FrameNo)
		require.Equal(t, `{"ok":true}`, string(again.Data))
		_, err = c.AppendFrame(ctx, "c2", "text/plain", []byte("late"))
		require.ErrorIs(t, err, store.ErrCallClosed)

		rec, err := c.GetCall(ctx, "c2")
		require.NoError(t, err)
		require.True(t, rec.Final)
		require.Equal(t, uint64(3), rec.Frames)
		require.Equal(t, uint64(11+len(`{"ok":true}`)), rec.Bytes)

		all, err := c.Frames(ctx, "c2", 0, 0)
		require.NoError(t, err)
		require.Len(t, all, 3)
		require.Equal(t, "hello", string(all[0].Data))
		require.Empty(t, all[0].Summary)
		require.False(t, all[1].Final)
		require.True(t, all[2].Final)
		after, err := c.Frames(ctx, "c2", 1, 1)
		require.NoError(t, err)
		require.Len(t, after, 1, "limit")
		require.Equal(t, uint64(2), after[0].FrameNo, "resumes after the given frame")
		none, err := c.Frames(ctx, "c2", 3, 0)
		require.NoError(t, err)
		require.Empty(t, none)

		// Copies: changing what a read returned changes nothing stored.
		all[0].Data[0] = 'X'
		again2, err := c.Frames(ctx, "c2", 0, 1)
		require.NoError(t, err)
		require.Equal(t, "hello", string(again2[0].Data))
	})

	t.Run("ConcurrentAppendsHaveNoGaps", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		_, _, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: "c3"})
		require.NoError(t, err)
		const writers, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers*each+writers)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if _, err := c.AppendFrame(ctx, "c3", "text/plain", fmt.Appendf(nil, "%d-%d", w, i)); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		fs, err := c.Frames(ctx, "c3", 0, 0)
		require.NoError(t, err)
		require.Len(t, fs, writers*each)
		for i, f := range fs {
			require.Equal(t, uint64(i+1), f.FrameNo)
		}
	})

	t.Run("ConcurrencySlots", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		take := func(call string, lease time.Duration) bool {
			ok, err := c.AcquireSlot(ctx, "p", "t", call, 2, lease)
			require.NoError(t, err)
			return ok
		}
		require.True(t, take("a", time.Minute))
		require.True(t, take("b", time.Minute))
		require.False(t, take("c", time.Minute), "both slots are held")
		require.True(t, take("a", time.Minute), "a holder renews its own slot")
		ok, err := c.AcquireSlot(ctx, "p", "other", "c", 2, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "slots are per tool")
		require.NoError(t, c.ReleaseSlot(ctx, "p", "t", "a"))
		require.NoError(t, c.ReleaseSlot(ctx, "p", "t", "never-held"))
		require.True(t, take("c", time.Minute), "a released slot is free")

		// A lease that passed frees its slot: the worker holding it died.
		ok, err = c.AcquireSlot(ctx, "p", "short", "x", 1, 50*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = c.AcquireSlot(ctx, "p", "short", "y", 1, time.Minute)
		require.NoError(t, err)
		require.False(t, ok)
		time.Sleep(150 * time.Millisecond)
		ok, err = c.AcquireSlot(ctx, "p", "short", "y", 1, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the expired lease no longer counts")

		// Concurrent takers never exceed the limit.
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 8 {
			wg.Go(func() {
				ok, err := c.AcquireSlot(ctx, "p", "race", fmt.Sprintf("r%d", i), 3, time.Minute)
				if err == nil && ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 3, won)
	})

	t.Run("RacingFinishesDecideOnce", func(t *testing.T) {
		c := newStore(t).ToolCalls()
		ctx := t.Context()
		_, _, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: "c4"})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := range 6 {
			wg.Go(func() {
				_, created, err := c.Finish(ctx, "c4", "text/plain", fmt.Appendf(nil, "%d", i), nil)
				if err == nil && created {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 1, wins)
		fs, err := c.Frames(ctx, "c4", 0, 0)
		require.NoError(t, err)
		require.Len(t, fs, 1)
		require.True(t, fs[0].Final)
	})
}
