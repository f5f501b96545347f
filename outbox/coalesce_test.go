package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// batches records the batches a coalescing kind delivered.
type batches struct {
	mu   sync.Mutex
	got  [][]string
	fail bool
}

func (b *batches) deliver(_ context.Context, es []store.OutboxEntry) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return context.DeadlineExceeded
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	b.got = append(b.got, ids)
	return nil
}

func (b *batches) seen() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]string(nil), b.got...)
}

func newCoalescingRelay(t *testing.T, linger time.Duration) (*outbox.Relay, store.Outbox, *batches) {
	t.Helper()
	rel, ob := newBareRelay(t)
	b := &batches{}
	// Entries whose ID starts with "wait" may wait for a later one.
	rel.Coalesce("ack", outbox.Coalescing{Linger: linger, MayWait: func(e store.OutboxEntry) bool { return strings.HasPrefix(e.ID, "wait") },
		Deliver: b.deliver})
	return rel, ob, b
}

func addTo(t *testing.T, ob store.Outbox, wf, id string) store.OutboxEntry {
	t.Helper()
	e := store.OutboxEntry{ID: id, Kind: "ack", WorkflowID: wf}
	require.NoError(t, ob.Add(t.Context(), []store.OutboxEntry{e}, store.OutboxLease))
	return e
}

// TestCoalescedEntriesGoTogether: an entry that may wait is held; the next entry for the same
// workflow takes it along, in order, in one delivery; another workflow's entries are apart;
// every delivered entry leaves the outbox.
func TestCoalescedEntriesGoTogether(t *testing.T) {
	rel, ob, b := newCoalescingRelay(t, time.Hour)
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf1", "wait-1")))
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf2", "now-2")))
	require.Equal(t, [][]string{{"now-2"}}, b.seen(), "the held entry waits; another workflow's goes at once")
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf1", "now-1")))
	require.Equal(t, [][]string{{"now-2"}, {"wait-1", "now-1"}}, b.seen())
	require.Empty(t, pending(t, ob))
}

// TestHeldEntryGoesAloneAfterLinger: a held entry that nothing follows is delivered on its
// own once its linger ran out, and leaves the outbox.
func TestHeldEntryGoesAloneAfterLinger(t *testing.T) {
	rel, ob, b := newCoalescingRelay(t, 10*time.Millisecond)
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf", "wait-1")))
	require.Eventually(t, func() bool { return len(b.seen()) == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, [][]string{{"wait-1"}}, b.seen())
	require.Eventually(t, func() bool { return len(pending(t, ob)) == 0 }, 5*time.Second, time.Millisecond)
}

// TestFailedBatchIsRetriedByRun: a batch Temporal refuses stays in the outbox, and Run
// delivers each of its entries later: nothing is lost.
func TestFailedBatchIsRetriedByRun(t *testing.T) {
	rel, ob, b := newCoalescingRelay(t, time.Hour)
	b.fail = true
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf", "wait-1")))
	require.Error(t, rel.Deliver(t.Context(), addTo(t, ob, "wf", "now-1")))
	require.Len(t, pending(t, ob), 2)
	b.mu.Lock()
	b.fail = false
	b.mu.Unlock()
	runUntilEmpty(t, rel, ob)
	require.ElementsMatch(t, [][]string{{"wait-1"}, {"now-1"}}, b.seen())
}

// TestHeldEntriesStayWhenTheRelayStops: entries held when the relay's Run ends are not
// delivered by this process any more; they stay in the outbox for the next relay.
func TestHeldEntriesStayWhenTheRelayStops(t *testing.T) {
	rel, ob, b := newCoalescingRelay(t, 50*time.Millisecond)
	require.NoError(t, rel.Deliver(t.Context(), addTo(t, ob, "wf", "wait-1")))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rel.Run(ctx)
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, b.seen(), "nothing delivered after the relay stopped")
	require.Len(t, pending(t, ob), 1, "the entry is still in the outbox")
}
