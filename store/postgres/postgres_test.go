package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/store/storetest"
)

// open opens a Store on url and closes it when the test ends.
func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, url, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// testWriter sends log lines to t.Log, so warnings show up next to the test that caused them.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.NewDatabase(t))
	})
}

// TestCrossProcessSubscribe checks that a Store sees admissions and lease releases made by
// another Store (standing in for another frontend process) through LISTEN/NOTIFY.
func TestCrossProcessSubscribe(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()

	ch, cancel := a.Messages().Subscribe(ctx, "bob")
	defer cancel()
	other, cancelOther := a.Messages().Subscribe(ctx, "carol")
	defer cancelOther()

	_, err := b.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope("m1"), RecipientID: "bob", Capacity: 10, Track: true})
	require.NoError(t, err)
	requireWake(t, ch)
	requireNoWake(t, other)

	// The row admitted by b is claimable through a.
	ds, err := a.Messages().Claim(ctx, store.ClaimRequest{AgentID: "bob", Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, ds, 1)

	// A new stream on b releases the lease a's stream holds; a hears about it.
	drain(ch)
	require.NoError(t, b.Messages().ReleaseLeases(ctx, "bob"))
	requireWake(t, ch)
	ds, err = a.Messages().Claim(ctx, store.ClaimRequest{AgentID: "bob", Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, 2, ds[0].Attempts)

	// Capacity is shared too: b's admits count against a's limit.
	_, err = a.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope("m2"), RecipientID: "bob", Capacity: 1})
	require.ErrorIs(t, err, store.ErrBufferFull)
}

// TestListenerReconnects kills the listener's connection and checks that the Store
// reconnects, wakes every subscriber once so they re-poll, and hears notifications again.
func TestListenerReconnects(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()

	ch, cancel := a.Messages().Subscribe(ctx, "bob")
	defer cancel()
	other, cancelOther := a.Messages().Subscribe(ctx, "carol")
	defer cancelOther()

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var killed int
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'sw4rm-store-listener'`).Scan(&killed))
	require.Equal(t, 2, killed, "one listener connection per Store")

	requireWake(t, ch)
	requireWake(t, other)

	// The reconnect wake-up is sent only after LISTEN is active again, so from here on an
	// admission through b must reach a's subscriber.
	drain(ch)
	_, err = b.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope("m1"), RecipientID: "bob"})
	require.NoError(t, err)
	requireWake(t, ch)
}

// TestMigrationsAreIdempotent opens the store twice on one database, the second time
// concurrently from several goroutines (processes starting at once): migrations run once and
// every Open succeeds.
func TestMigrationsAreIdempotent(t *testing.T) {
	url := pgtest.NewDatabase(t)
	first := open(t, url)
	_, err := first.Messages().Admit(t.Context(), store.AdmitRequest{Envelope: storetest.Envelope("m1"), RecipientID: "bob"})
	require.NoError(t, err)

	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stores[i], errs[i] = postgres.Open(ctx, url, nil)
		}()
	}
	wg.Wait()
	for i := range stores {
		require.NoError(t, errs[i])
		stores[i].Close()
	}

	// Data survived the second Open, and goose recorded each migration exactly once.
	n, err := first.Messages().Depth(t.Context(), "bob")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var applied, distinct int
	require.NoError(t, first.Pool().QueryRow(t.Context(), `
		SELECT count(*), count(DISTINCT version_id) FROM `+postgres.MigrationsTable+` WHERE version_id > 0`).Scan(&applied, &distinct))
	require.Positive(t, applied)
	require.Equal(t, distinct, applied)
}

// TestConcurrentAdmitsAcrossStores is the capacity race across processes: two Stores (two
// pools) admit to one recipient at once, and the buffer still never exceeds its capacity.
func TestConcurrentAdmitsAcrossStores(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stores := []*postgres.Store{open(t, url), open(t, url)}
	ctx := t.Context()
	const n, capacity = 60, 7
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := stores[i%2].Messages().Admit(ctx, store.AdmitRequest{
				Envelope: storetest.Envelope(fmt.Sprintf("m%d", i)), RecipientID: "bob", Capacity: capacity,
			})
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !isBufferFull(err) {
				t.Errorf("admit: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, capacity, ok)
	d, err := stores[0].Messages().Depth(ctx, "bob")
	require.NoError(t, err)
	require.Equal(t, capacity, d)
}

// TestCloseStopsListener checks that Close returns promptly, can be repeated, leaves no
// goroutine behind (listener, pool, migration handle), and that a subscription taken after
// Close never fires.
func TestCloseStopsListener(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := runtime.NumGoroutine()
	s, err := postgres.Open(ctx, url, nil)
	require.NoError(t, err)
	ch, stop := s.Messages().Subscribe(ctx, "bob")
	_, err = s.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope("m1"), RecipientID: "bob"})
	require.NoError(t, err)
	requireWake(t, ch)
	stop()
	done := make(chan struct{})
	go func() {
		s.Close()
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines leaked by Open/Close: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}

	ch, stop = s.Messages().Subscribe(ctx, "bob")
	defer stop()
	requireNoWake(t, ch)
}

func TestOpenFailsOnBadURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := postgres.Open(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", nil)
	require.Error(t, err)
	_, err = postgres.Open(ctx, "::not a url::", nil)
	require.Error(t, err)
}

func isBufferFull(err error) bool { return errors.Is(err, store.ErrBufferFull) }

func requireWake(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no Subscribe wake-up")
	}
}

func requireNoWake(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("unexpected Subscribe wake-up")
	case <-time.After(300 * time.Millisecond):
	}
}

// drain lets trailing wake-ups arrive and empties the channel.
func drain(ch <-chan struct{}) {
	time.Sleep(300 * time.Millisecond)
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
