package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
)

func testKey(agentID string, i int) store.AgentKey {
	pub := []byte(fmt.Sprintf("%-32d", i))
	return store.AgentKey{AgentID: agentID, KeyID: auth.KeyID(auth.AlgorithmEd25519, pub), Algorithm: auth.AlgorithmEd25519, PublicKey: pub}
}

// TestKeysAcrossStores: two Stores (two frontends) share the keys and the nonces. Concurrent
// first registrations of one agent through both are decided once, the same nonce used
// through both at once is fresh once, and a revocation through one changes the generation the
// other reads.
func TestKeysAcrossStores(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stores := []*postgres.Store{open(t, url), open(t, url)}
	ctx := t.Context()

	const n = 12
	var (
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		won, refused, fresh int
		errs                []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			err := stores[i%2].Keys().AddAgentKey(ctx, testKey("alice", i), true)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrKeyConflict):
				refused++
			default:
				errs = append(errs, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			ok, err := stores[i%2].Keys().UseNonce(ctx, "alice", "shared-nonce-0001", time.Now().Add(time.Hour))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				fresh++
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, 1, won, "one first registration wins across stores")
	require.Equal(t, n-1, refused)
	require.Equal(t, 1, fresh, "one use of the nonce is fresh across stores")

	keys, err := stores[1].Keys().ListAgentKeys(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	g, err := stores[1].Keys().KeysGeneration(ctx)
	require.NoError(t, err)
	revoked, err := stores[0].Keys().RevokeAgentKey(ctx, "alice", keys[0].KeyID, time.Now(), "olga", "test")
	require.NoError(t, err)
	require.Equal(t, 1, revoked)
	g2, err := stores[1].Keys().KeysGeneration(ctx)
	require.NoError(t, err)
	require.NotEqual(t, g, g2, "the other store sees the revocation's generation")
}

// TestCloseStopsNonceBatcher: Close ends the batcher's goroutines, and UseNonce after Close
// fails at once instead of waiting for a batch that never comes.
func TestCloseStopsNonceBatcher(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := runtime.NumGoroutine()
	s, err := postgres.Open(ctx, url, nil)
	require.NoError(t, err)
	fresh, err := s.Keys().UseNonce(ctx, "alice", "n-0000000000000001", time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, fresh)
	s.Close()

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines leaked by Open/UseNonce/Close: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
	_, err = s.Keys().UseNonce(ctx, "alice", "n-0000000000000002", time.Now().Add(time.Hour))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "UseNonce after Close returned before its context ended")
}

// BenchmarkUseNonce measures UseNonce from many goroutines at once, the load of a frontend
// verifying signed calls: the batcher turns them into few statements.
func BenchmarkUseNonce(b *testing.B) {
	s, err := postgres.Open(b.Context(), pgtest.NewDatabase(b), nil)
	require.NoError(b, err)
	b.Cleanup(s.Close)
	until := time.Now().Add(time.Hour)
	var next sync.Mutex
	i := 0
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			next.Lock()
			i++
			nonce := fmt.Sprintf("bench-nonce-%016d", i)
			next.Unlock()
			if _, err := s.Keys().UseNonce(context.Background(), "alice", nonce, until); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
