package router

import (
	"context"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// agentCacheTTL bounds how long a registry lookup is reused. Every message needs the
// recipient's descriptor (route, modalities) and the producer's (lane), so caching saves most
// of the registry reads on the hot path. Only found agents are cached, so a new registration
// is routable at once everywhere; a deregistration reaches other frontends within the TTL.
const agentCacheTTL = time.Second

type cachedAgent struct {
	rec     store.AgentRecord
	fetched time.Time
}

// agentCache is a small read-through cache of registry records.
type agentCache struct {
	mu      sync.Mutex
	entries map[string]cachedAgent
}

func (c *agentCache) get(ctx context.Context, reg store.Registry, id string) (store.AgentRecord, error) {
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if ok && time.Since(e.fetched) < agentCacheTTL {
		return e.rec, nil
	}
	rec, err := reg.GetAgent(ctx, id)
	if err != nil {
		c.forget(id)
		return rec, err
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]cachedAgent{}
	}
	if len(c.entries) > 100_000 {
		clear(c.entries) // crude bound; the cache refills in a second
	}
	c.entries[id] = cachedAgent{rec: rec, fetched: time.Now()}
	c.mu.Unlock()
	return rec, nil
}

func (c *agentCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

// ForgetAgent drops an agent from the router's registry cache; the registry service calls it
// on every registration and deregistration so this frontend never routes on stale data.
func (r *Router) ForgetAgent(agentID string) { r.agents.forget(agentID) }

// agent reads a registry record through the cache.
func (r *Router) agent(ctx context.Context, id string) (store.AgentRecord, error) {
	return r.agents.get(ctx, r.st.Registry(), id)
}

// Agent returns an agent's registry record as routing sees it: through the same cache, so a
// registration is seen at once and a deregistration elsewhere within agentCacheTTL.
// ErrNotFound (wrapped) means the agent is not registered.
func (r *Router) Agent(ctx context.Context, id string) (store.AgentRecord, error) {
	return r.agent(ctx, id)
}
