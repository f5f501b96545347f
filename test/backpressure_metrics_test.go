package test

import (
	"context"
	"io"
	"net/http"
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
			require.Eventually(t, func() bool {
				m = scrape(t, sys)
				return strings.Contains(m, "router_inbound_queue_depth{"+agent+"} 10")
			}, 10*time.Second, 100*time.Millisecond, "the depth of the full buffer")
			assert.Contains(t, m, "router_inbound_queue_capacity{"+agent+"} 10")
			assert.Contains(t, m, "router_oldest_enqueued_age_seconds{"+agent+"}")
			var rejects string
			for _, line := range strings.Split(m, "\n") {
				if strings.HasPrefix(line, "router_enqueue_rejects_total{") && strings.Contains(line, agent) {
					rejects = line
				}
			}
			assert.Contains(t, rejects, "BUFFER_FULL", "the refused admission is counted by code")
			assert.True(t, strings.HasSuffix(rejects, " 1"), "one refusal: %q", rejects)
		})
	}
}
