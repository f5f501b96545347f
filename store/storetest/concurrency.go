package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// drainOnce runs workers goroutines that each call take until it hands out nothing or fails,
// and requires that no call failed and that exactly n items were handed out, each once.
func drainOnce[K comparable](t *testing.T, workers, n int, take func() ([]K, error)) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[K]int{}
		errs []error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				items, err := take()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, k := range items {
					seen[k]++
				}
				mu.Unlock()
				if err != nil || len(items) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, seen, n)
	for k, times := range seen {
		require.Equal(t, 1, times, "%v handed out %d times", k, times)
	}
}

// oneWins starts n calls of call at the same instant and requires that exactly one succeeds
// and every other fails with refused; it returns the winner's i.
func oneWins(t *testing.T, n int, refused error, call func(i int) error) int {
	t.Helper()
	var (
		mu        sync.Mutex
		winners   []int
		refusals  int
		otherErrs []error
	)
	atOnce(n, func(i int) {
		err := call(i)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			winners = append(winners, i)
		case errors.Is(err, refused):
			refusals++
		default:
			otherErrs = append(otherErrs, err)
		}
	})
	require.Empty(t, otherErrs)
	require.Len(t, winners, 1, "exactly one call wins")
	require.Equal(t, n-1, refusals)
	return winners[0]
}

// atOnce runs call(i) for every i below n, each in its own goroutine, all released at the same
// instant, and waits for them.
func atOnce(n int, call func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			call(i)
		}()
	}
	close(start)
	wg.Wait()
}
