package audit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// batchLog records appends; failBatch makes AppendBatch fail so the fallback is exercised.
type batchLog struct {
	mu        sync.Mutex
	events    []store.Event
	batches   int
	failBatch bool
}

func (b *batchLog) Append(_ context.Context, e store.Event) (store.Event, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, e)
	return e, nil
}

func (b *batchLog) AppendBatch(_ context.Context, es []store.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failBatch {
		return errors.New("batch refused")
	}
	b.batches++
	b.events = append(b.events, es...)
	return nil
}

func (b *batchLog) List(context.Context, store.AuditFilter) ([]store.Event, error) { return nil, nil }

func (b *batchLog) MaxHLC(context.Context) (string, error) { return "", nil }

func types(es []store.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Type)
	}
	return out
}

func TestAsyncSinkKeepsOrderAndDrainsOnClose(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch fails %v", fail), func(t *testing.T) {
			log := &batchLog{failBatch: fail}
			sink := audit.NewAsync(nil, log, 8)
			var want []string
			for i := range 100 { // more than the queue holds: some are written synchronously
				typ := fmt.Sprintf("e.%03d", i)
				want = append(want, typ)
				sink.Record(context.Background(), audit.Event{Type: typ, Details: map[string]any{"i": i}})
			}
			sink.Close()
			sink.Close() // idempotent
			require.ElementsMatch(t, want, types(log.events), "nothing dropped")
			sink.Record(context.Background(), audit.Event{Type: "after.close"})
			require.Contains(t, types(log.events), "after.close", "a closed sink writes synchronously")
		})
	}
}

func TestAsyncSinkOrderWithoutOverflow(t *testing.T) {
	log := &batchLog{}
	sink := audit.NewAsync(nil, log, 1024)
	for i := range 50 {
		sink.Record(context.Background(), audit.Event{Type: fmt.Sprintf("e.%02d", i)})
	}
	sink.Close()
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprintf("e.%02d", i))
	}
	require.Equal(t, want, types(log.events), "one writer keeps the order")
	require.Positive(t, log.batches)
}

func TestSyncSinkWritesToTheStore(t *testing.T) {
	st := memory.New()
	defer st.Close()
	sink := audit.New(nil, st.Audit())
	sink.Record(context.Background(), audit.Event{CorrelationID: "c", Actor: "a", Type: "t.x", AgentID: "ag", MessageID: "m", Details: map[string]any{"k": "v"}})
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{CorrelationID: "c"})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "t.x", evs[0].Type)
	require.JSONEq(t, `{"k":"v"}`, string(evs[0].Details))
	require.False(t, evs[0].Time.IsZero())
}

// outageLog is an audit log whose store is unavailable for the first `down` calls.
type outageLog struct {
	batchLog
	down int
}

func (o *outageLog) AppendBatch(ctx context.Context, es []store.Event) error {
	o.mu.Lock()
	if o.down > 0 {
		o.down--
		o.mu.Unlock()
		return fmt.Errorf("append: %w: connection refused", store.ErrUnavailable)
	}
	o.mu.Unlock()
	return o.batchLog.AppendBatch(ctx, es)
}

func (o *outageLog) Append(ctx context.Context, e store.Event) (store.Event, error) {
	o.mu.Lock()
	if o.down > 0 {
		o.down--
		o.mu.Unlock()
		return store.Event{}, fmt.Errorf("append: %w: connection refused", store.ErrUnavailable)
	}
	o.mu.Unlock()
	return o.batchLog.Append(ctx, e)
}

// TestAsyncSinkWaitsOutAnUnavailableStore: events recorded just before the database went
// away are written once it is back, in order, none lost (§19) — issue 13's missing
// message.admitted row after a PostgreSQL crash.
func TestAsyncSinkWaitsOutAnUnavailableStore(t *testing.T) {
	log := &outageLog{down: 3}
	sink := audit.NewAsync(slog.New(slog.DiscardHandler), log, 64)
	var want []string
	for i := range 10 {
		typ := fmt.Sprintf("e.%02d", i)
		want = append(want, typ)
		sink.Record(context.Background(), audit.Event{Type: typ})
	}
	sink.Close()
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Equal(t, want, types(log.events))
	require.Zero(t, log.down, "the writer retried through the outage")
}

// TestRecordStampsHLCAndTraceID: the sink stamps each row with its clock's reading, in
// increasing order, and with the trace id of the context's span when there is one (§4, §19).
func TestRecordStampsHLCAndTraceID(t *testing.T) {
	st := memory.New()
	sink := audit.New(nil, st.Audit())
	clock, err := hlc.NewClock("node-a", nil, 0)
	require.NoError(t, err)
	sink.SetClock(clock)
	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	traced := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled}))
	sink.Record(traced, audit.Event{Type: "x.one", CorrelationID: "c"})
	sink.Record(t.Context(), audit.Event{Type: "x.two", CorrelationID: "c"})
	sink.Record(t.Context(), audit.Event{Type: "x.three", CorrelationID: "c", HLC: "0000000000000001.000000.given"})
	events, err := st.Audit().List(t.Context(), store.AuditFilter{CorrelationID: "c"})
	require.NoError(t, err)
	require.Len(t, events, 3)
	require.Equal(t, traceID.String(), events[0].TraceID)
	require.Empty(t, events[1].TraceID, "no span, no trace id")
	a, err := hlc.Parse(events[0].HLC)
	require.NoError(t, err)
	b, err := hlc.Parse(events[1].HLC)
	require.NoError(t, err)
	require.Equal(t, "node-a", a.Node)
	require.True(t, a.Before(b), "%s before %s", a, b)
	require.Equal(t, "0000000000000001.000000.given", events[2].HLC, "an HLC already set is kept")
	top, err := st.Audit().MaxHLC(t.Context())
	require.NoError(t, err)
	require.Equal(t, events[1].HLC, top)
}
