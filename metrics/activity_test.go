package metrics

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// The warning gauge turns on only past 80 % of the limit (§10.1).
func TestActivityBufferWarningGauge(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	ab := st.ActivityBuffer()
	c := &activityCollector{ab: ab, lim: store.ActivityLimits{MaxActive: 10, MaxPerAgent: 10}}
	for i := range 8 {
		_, err := ab.Put(t.Context(), store.ActivityEntry{AgentID: "a", TaskID: "t" + strconv.Itoa(i)}, c.lim)
		require.NoError(t, err)
	}
	require.Equal(t, 8.0, gauge(t, c, "sw4rm_activity_buffer_active_entries"))
	require.Equal(t, 0.0, gauge(t, c, "sw4rm_activity_buffer_over_warning"), "exactly 80 % is not past it")
	_, err := ab.Put(t.Context(), store.ActivityEntry{AgentID: "a", TaskID: "t9"}, c.lim)
	require.NoError(t, err)
	require.Equal(t, 1.0, gauge(t, c, "sw4rm_activity_buffer_over_warning"))
	require.Equal(t, 10.0, gauge(t, c, "sw4rm_activity_buffer_limit_entries"))
}

// gauge collects c and returns the value of the named gauge.
func gauge(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	for m := range ch {
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		var out dto.Metric
		require.NoError(t, m.Write(&out))
		return out.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
