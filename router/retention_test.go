package router

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// pruneCounter is a Metrics that counts pruned rows too.
type pruneCounter struct {
	Metrics
	mu sync.Mutex
	n  map[string]int
}

func (p *pruneCounter) Pruned(kind string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[kind] += n
}

// TestRetainOnce: each kind is pruned past its own retention, in batches beyond
// retentionBatch, a negative retention keeps its kind forever, and the metrics count what
// went.
func TestRetainOnce(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := New(st, Config{AckTimeout: time.Minute, AuditRetention: time.Hour, HITLRetention: -1},
		audit.New(slog.New(slog.DiscardHandler), nil))
	m := &pruneCounter{n: map[string]int{}}
	r.SetMetrics(m)
	ctx := t.Context()
	old := time.Now().Add(-2 * time.Hour)
	for range retentionBatch + 3 {
		_, err := st.Audit().Append(ctx, store.Event{Type: "test.old", Actor: "t", Time: old})
		require.NoError(t, err)
	}
	_, err := st.Audit().Append(ctx, store.Event{Type: "test.new", Actor: "t"})
	require.NoError(t, err)
	require.NoError(t, st.HITL().PutInvocation(ctx, store.HITLRecord{InvocationID: "i1", CreatedAt: old.Add(-30 * 24 * time.Hour)}))
	require.NoError(t, st.HITL().CompleteInvocation(ctx, "i1", []byte(`{}`), old.Add(-30*24*time.Hour)))

	counts, err := r.RetainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, retentionBatch+3, counts["audit_events"])
	require.Zero(t, counts["hitl_invocations"], "HITL is kept forever")
	_, err = st.HITL().GetInvocation(ctx, "i1")
	require.NoError(t, err)
	evs, err := st.Audit().List(ctx, store.AuditFilter{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, map[string]int{"audit_events": retentionBatch + 3}, m.n)

	counts, err = r.RetainOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, counts["audit_events"], "a second pass finds nothing")
}

// TestMessageRetentionFloor: a finished message is kept at least as long as the dedup window,
// whatever its own retention says.
func TestMessageRetentionFloor(t *testing.T) {
	r := New(memory.New(), Config{MessageRetention: time.Second, DedupWindow: time.Hour, StreamRetention: time.Minute}, nil)
	for _, k := range r.retentionKinds() {
		if k.kind == "messages" {
			require.Equal(t, time.Hour, k.keep)
		}
	}
	r = New(memory.New(), Config{MessageRetention: -1, DedupWindow: time.Hour}, nil)
	for _, k := range r.retentionKinds() {
		if k.kind == "messages" {
			require.Negative(t, k.keep, "forever stays forever")
		}
	}
}
