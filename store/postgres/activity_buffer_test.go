package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/store/storetest"
)

func TestActivityConformance(t *testing.T) {
	storetest.RunActivity(t, func(t *testing.T) store.Store {
		return open(t, pgtest.NewDatabase(t))
	})
}

// TestActivityLimitAcrossStores is the total-limit race across processes: two Stores (two
// pools) put entries at once, and the active buffer still never exceeds its limit; the
// per-agent limit holds the same way.
func TestActivityLimitAcrossStores(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stores := []*postgres.Store{open(t, url), open(t, url)}
	ctx := t.Context()
	const n, maxActive, maxPerAgent = 60, 9, 4
	lim := store.ActivityLimits{MaxActive: maxActive, MaxPerAgent: maxPerAgent}
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		ok, agentFull int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Agent "hot" gets every third Put; the others spread over many agents.
			agent := fmt.Sprint("agent", i)
			if i%3 == 0 {
				agent = "hot"
			}
			_, err := stores[i%2].ActivityBuffer().Put(ctx, storetest.ActivityEntry(agent, fmt.Sprint("t", i)), lim)
			mu.Lock()
			defer mu.Unlock()
			var full *store.ActivityFullError
			switch {
			case err == nil:
				ok++
			case errors.As(err, &full):
				if full.PerAgent {
					agentFull++
				}
			default:
				t.Errorf("put: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, maxActive, ok)
	u, err := stores[0].ActivityBuffer().Usage(ctx, "hot", lim)
	require.NoError(t, err)
	require.Equal(t, maxActive, u.Active)
	require.LessOrEqual(t, u.AgentActive, maxPerAgent)
	es, err := stores[1].ActivityBuffer().List(ctx, store.ActivityFilter{})
	require.NoError(t, err)
	require.Len(t, es, maxActive)
}
