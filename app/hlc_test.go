package app

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestNewClockStartsAboveTheStore: a process whose clock is behind what the store holds —
// restarted on a slower host, or next to a frontend whose clock runs ahead — never stamps
// below the store's highest HLC (§4).
func TestNewClockStartsAboveTheStore(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	behind := time.Unix(1725552000, 0)
	floor := hlc.Timestamp{Physical: behind.Add(time.Hour).UnixMicro(), Logical: 7, Node: "earlier-run"}
	_, err := st.Audit().Append(t.Context(), store.Event{Type: "x", HLC: floor.String()})
	require.NoError(t, err)
	clock, err := newClock(t.Context(), Config{PhysicalClock: func() time.Time { return behind }}, st, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	got := clock.Now()
	require.True(t, floor.Before(got), "%s after the store's %s", got, floor)
	require.NotEqual(t, "earlier-run", got.Node)
	require.NoError(t, hlc.ValidNode(NodeID()))
	require.NotEqual(t, NodeID(), NodeID(), "two clocks never share a node")
}
