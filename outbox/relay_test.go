package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// fakeTemporal records what the handler delivered and fails while down is set.
type fakeTemporal struct {
	mu        sync.Mutex
	down      bool
	delivered []string
}

func (f *fakeTemporal) handle(_ context.Context, h store.OutboxEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("temporal unreachable")
	}
	f.delivered = append(f.delivered, h.ID)
	return nil
}

func (f *fakeTemporal) set(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeTemporal) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.delivered...)
}

// newBareRelay returns a relay over a fresh memory store's outbox, with backoffs short
// enough for tests and no handlers.
func newBareRelay(t *testing.T) (*outbox.Relay, store.Outbox) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	rel := outbox.New(st.Outbox(), outbox.Config{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, InlineTimeout: time.Second},
		slog.New(slog.DiscardHandler), nil)
	return rel, st.Outbox()
}

func newRelay(t *testing.T) (*outbox.Relay, store.Outbox, *fakeTemporal) {
	t.Helper()
	rel, ob := newBareRelay(t)
	f := &fakeTemporal{}
	rel.Handle("k", f.handle)
	return rel, ob, f
}

func add(t *testing.T, ob store.Outbox, ids ...string) []store.OutboxEntry {
	t.Helper()
	var hs []store.OutboxEntry
	for _, id := range ids {
		hs = append(hs, store.OutboxEntry{ID: id, Kind: "k", WorkflowID: "wf"})
	}
	require.NoError(t, ob.Add(t.Context(), hs, store.OutboxLease))
	return hs
}

func pending(t *testing.T, ob store.Outbox) []store.OutboxEntry {
	t.Helper()
	hs, err := ob.Pending(t.Context(), 100)
	require.NoError(t, err)
	return hs
}

// runUntilEmpty runs the relay until the outbox is empty.
func runUntilEmpty(t *testing.T, rel *outbox.Relay, ob store.Outbox) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := rel.RunOnce(t.Context())
		return err == nil && len(pending(t, ob)) == 0
	}, 5*time.Second, 5*time.Millisecond)
}

func TestDeliverInLineRemovesWhatTemporalTook(t *testing.T) {
	rel, ob, f := newRelay(t)
	hs := add(t, ob, "a", "b")
	require.NoError(t, rel.Deliver(t.Context(), hs...))
	require.Equal(t, []string{"a", "b"}, f.got())
	require.Empty(t, pending(t, ob))
}

func TestFailedHandoffsAreRetriedInOrderOnceTemporalIsBack(t *testing.T) {
	rel, ob, f := newRelay(t)
	f.set(true)
	hs := add(t, ob, "a", "b", "c")
	require.Error(t, rel.Deliver(t.Context(), hs...), "the caller hears of the failure")
	left := pending(t, ob)
	require.Len(t, left, 3, "nothing is lost")
	require.Equal(t, 1, left[0].Attempts)
	require.Equal(t, "temporal unreachable", left[0].LastError)
	n, err := rel.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "still down")
	f.set(false)
	runUntilEmpty(t, rel, ob)
	require.Equal(t, []string{"a", "b", "c"}, f.got(), "each once, in the order written")
}

func TestAHandoffWhoseWriterDiedIsDeliveredAfterItsLease(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	rel := outbox.New(st.Outbox(), outbox.Config{}, slog.New(slog.DiscardHandler), nil)
	f := &fakeTemporal{}
	rel.Handle("k", f.handle)
	// The writer leased it for its in-line attempt and died: a short lease for the test.
	require.NoError(t, st.Outbox().Add(t.Context(), []store.OutboxEntry{{ID: "orphan", Kind: "k"}}, 50*time.Millisecond))
	n, err := rel.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "the writer's lease holds it at first")
	runUntilEmpty(t, rel, st.Outbox())
	require.Equal(t, []string{"orphan"}, f.got())
}

func TestPermanentFailuresAndUnknownKinds(t *testing.T) {
	rel, ob, _ := newRelay(t)
	rel.Handle("bad", func(context.Context, store.OutboxEntry) error { return outbox.Permanent(errors.New("undecodable")) })
	require.NoError(t, ob.Add(t.Context(), []store.OutboxEntry{{ID: "p", Kind: "bad"}, {ID: "u", Kind: "from-a-newer-version"}}, 0))
	_, err := rel.RunOnce(t.Context())
	require.NoError(t, err)
	left := pending(t, ob)
	require.Len(t, left, 1, "a permanent failure is dropped")
	require.Equal(t, "u", left[0].ID, "an unknown kind waits for a process that knows it")
	require.Contains(t, left[0].LastError, "no handler")
}
