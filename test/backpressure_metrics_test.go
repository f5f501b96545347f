package test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// scrape returns the frontend's /metrics exposition.
func scrape(t *testing.T, sys *system) string {
	t.Helper()
	res, err := http.Get("http://" + sys.app.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// series returns the value of the first series of an exposition whose line starts with
// prefix and contains every label in labels.
func series(exposition, prefix string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); match && i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestBackPressureMetrics (§13): on both stores, /metrics shows a full inbound buffer as it
// is — its depth and capacity per agent, the age of its oldest message — and counts the
// admission it refused BUFFER_FULL, by agent and code.
func TestBackPressureMetrics(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			producer := dialAgent(t, sys, "producer")
			busy := dialAgent(t, sys, "busy") // never reads
			for range sys.cfg.BufferCapacity {
				_, err := producer.Send(ctx, sdk.Message{To: busy.ID(), Payload: []byte(`{"n":1}`)})
				require.NoError(t, err)
			}
			_, err := producer.Send(ctx, sdk.Message{To: busy.ID(), Payload: []byte(`{"n":1}`)})
			require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "%v", err)

			agent := `agent_id="` + busy.ID() + `"`
			var m string
			// The depth counts control rows too (the scheduler's heartbeats, say), so a full
			// buffer shows at least its capacity.
			require.Eventually(t, func() bool {
				m = scrape(t, sys)
				depth, ok := series(m, "sw4rm_router_inbound_queue_depth{", agent)
				return ok && depth >= float64(sys.cfg.BufferCapacity)
			}, 10*time.Second, 100*time.Millisecond, "the depth of the full buffer")
			capacity, ok := series(m, "sw4rm_router_inbound_queue_capacity{", agent)
			assert.True(t, ok && capacity == float64(sys.cfg.BufferCapacity), "capacity %v", capacity)
			_, ok = series(m, "sw4rm_router_oldest_enqueued_age_seconds{", agent)
			assert.True(t, ok, "the oldest message's age")
			rejects, ok := series(m, "sw4rm_router_enqueue_rejects_total{", agent, "BUFFER_FULL")
			assert.True(t, ok && rejects == 1, "the refused admission is counted by agent and code: %v", rejects)
		})
	}
}
