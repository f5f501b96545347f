package sdk

import "sync"

// hlcSeen is the highest hlc_timestamp an agent has received (§4, §5.2). The SDK puts it on
// every envelope the agent sends without one, so the router orders what the agent sends
// after what it has received: a reply's HLC follows the message it answers, even across
// frontends whose clocks disagree. The server's stamps are padded so that text order is
// causal order (docs/observability.md), which makes the highest one the greatest string.
type hlcSeen struct {
	mu  sync.Mutex
	top string
}

// observe notes a received envelope's hlc_timestamp.
func (h *hlcSeen) observe(ts string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ts > h.top {
		h.top = ts
	}
}

// get returns the highest hlc_timestamp received; "" before any.
func (h *hlcSeen) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.top
}

// LastHLC returns the highest hlc_timestamp among the envelopes the agent has received (§4),
// which it sends on every envelope that has none; "" before any.
func (a *Agent) LastHLC() string { return a.hlc.get() }
