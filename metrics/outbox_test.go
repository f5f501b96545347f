package metrics

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// The outbox gauges show entries piling up while Temporal does not take them.
func TestOutboxGauges(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	c := &outboxCollector{ob: st.Outbox()}
	require.Equal(t, 0.0, gauge(t, c, "sw4rm_outbox_pending"))
	require.Equal(t, 0.0, gauge(t, c, "sw4rm_outbox_oldest_age_seconds"))
	require.NoError(t, st.Outbox().Add(t.Context(), []store.OutboxEntry{{ID: "a", Kind: "k"}, {ID: "b", Kind: "k"}}, time.Hour))
	require.NoError(t, st.Outbox().Retry(t.Context(), "a", time.Hour, "temporal unreachable"))
	require.Equal(t, 2.0, gauge(t, c, "sw4rm_outbox_pending"))
	require.Equal(t, 1.0, gauge(t, c, "sw4rm_outbox_failing"))
	require.GreaterOrEqual(t, gauge(t, c, "sw4rm_outbox_oldest_age_seconds"), 0.0)
	require.NoError(t, st.Outbox().Complete(t.Context(), []string{"a", "b"}))
	require.Equal(t, 0.0, gauge(t, c, "sw4rm_outbox_pending"))
}
