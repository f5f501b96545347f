package hub

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

func TestWakeIsPerAgentAndCoalesced(t *testing.T) {
	h := New()
	bob, stopBob := h.Subscribe(t.Context(), "bob")
	defer stopBob()
	carol, stopCarol := h.Subscribe(t.Context(), "carol")
	defer stopCarol()

	for range 5 {
		h.Wake("bob") // never blocks although nobody reads
	}
	require.True(t, fired(bob))
	require.False(t, fired(bob), "five wake-ups coalesce into one pending value")
	require.False(t, fired(carol), "another agent is not woken")

	h.WakeAll()
	require.True(t, fired(bob))
	require.True(t, fired(carol))
	require.Equal(t, 2, h.Len())
}

func TestCancelAndContextEndSubscription(t *testing.T) {
	h := New()
	ch, stop := h.Subscribe(t.Context(), "bob")
	stop()
	stop()
	h.Wake("bob")
	require.False(t, fired(ch))

	ctx, cancel := context.WithCancel(t.Context())
	ch, stop = h.Subscribe(ctx, "bob")
	defer stop()
	require.Equal(t, 1, h.Len())
	cancel()
	require.Eventually(t, func() bool { return h.Len() == 0 }, time.Second, 5*time.Millisecond)
	h.Wake("bob")
	require.False(t, fired(ch))
}

func TestClose(t *testing.T) {
	h := New()
	before, stop := h.Subscribe(t.Context(), "bob")
	defer stop()
	h.Close()
	h.Wake("bob")
	require.False(t, fired(before))
	after, stop2 := h.Subscribe(t.Context(), "bob")
	defer stop2()
	h.WakeAll()
	require.False(t, fired(after))
	require.Equal(t, 0, h.Len())
}
