package router

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// admitControl puts an untracked control row for agentID into the store and returns it as a
// stream would deliver it.
func admitControl(t *testing.T, st store.Store, agentID, messageID string) store.Delivery {
	t.Helper()
	env := &commonpb.Envelope{MessageId: messageID, ProducerId: "scheduler", MessageType: commonpb.MessageType_ACKNOWLEDGEMENT}
	seq, err := st.Messages().Admit(t.Context(), store.AdmitRequest{Envelope: env, RecipientID: agentID})
	require.NoError(t, err)
	return store.Delivery{Seq: seq, AgentID: agentID, Envelope: env}
}

func TestControlConfirms(t *testing.T) {
	st := memory.New()
	mp := st.Messages()
	var c controlConfirms
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	d0 := admitControl(t, st, "a", "before")
	handled, _ := c.take("a", d0.Seq, "")
	require.False(t, handled, "nothing is deferred before the writer runs")
	c.track(1, "a", d0)

	go func() { defer close(done); c.run(ctx, mp) }()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.active }, time.Second, time.Millisecond)

	d1 := admitControl(t, st, "a", "m1")
	d2 := admitControl(t, st, "a", "m2")
	d3 := admitControl(t, st, "a", "m3")
	for _, d := range []store.Delivery{d1, d2, d3} {
		c.track(7, "a", d)
	}
	handled, _ = c.take("a", d0.Seq, "")
	require.False(t, handled, "a row not tracked while the writer runs goes to the store")
	handled, _ = c.take("b", d1.Seq, "")
	require.False(t, handled, "another agent's seq goes to the store")

	handled, recorded := c.take("a", d1.Seq, "other")
	require.True(t, handled)
	require.False(t, recorded, "mismatched message_id")
	handled, recorded = c.take("a", d1.Seq, "m1")
	require.True(t, handled)
	require.True(t, recorded)
	handled, recorded = c.take("a", d1.Seq, "")
	require.True(t, handled)
	require.False(t, recorded, "second confirmation")

	c.drop("a", d2.Seq) // a permanent failure goes to the store
	handled, _ = c.take("a", d2.Seq, "")
	require.False(t, handled)

	c.forget(7) // the stream ended: d3, unconfirmed, is forgotten; d1 stays until written
	handled, _ = c.take("a", d3.Seq, "")
	require.False(t, handled)

	// The writer confirms d1 in the store; the others stay in the buffer.
	require.Eventually(t, func() bool {
		n, err := mp.Depth(t.Context(), "a")
		return err == nil && n == 3
	}, 5*time.Second, time.Millisecond)
	_, ok, err := mp.Confirm(t.Context(), "a", d1.Seq, "")
	require.NoError(t, err)
	require.False(t, ok, "d1 was confirmed by the writer")

	// Concurrent confirmations of one row: exactly one is recorded.
	d4 := admitControl(t, st, "a", "m4")
	c.track(8, "a", d4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	recordedN := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, r := c.take("a", d4.Seq, "m4"); h && r {
				mu.Lock()
				recordedN++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, recordedN)

	// Stopping writes what is left and stops deferring.
	cancel()
	<-done
	n, err := mp.Depth(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, 3, n, "d4 was written at stop; d0, d2 and d3 remain")
	handled, _ = c.take("a", d0.Seq, "")
	require.False(t, handled)
}
