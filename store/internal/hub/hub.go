// Package hub fans "a row may be deliverable for agent X" wake-ups out to the local
// subscribers of store.MessagePlane.Subscribe. Both store implementations use it: memory
// wakes it directly on Admit/ReleaseLeases, postgres wakes it from its LISTEN goroutine.
package hub

import (
	"context"
	"sync"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// Hub holds the live subscriptions of one store, and the inboxes attached to it
// (store.MessagePlane.Attach). The zero value is not usable; call New.
type Hub struct {
	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	inboxes map[string]*store.Inbox
	closed  bool
}

// New returns an empty hub.
func New() *Hub {
	return &Hub{subs: make(map[string]map[chan struct{}]struct{}), inboxes: make(map[string]*store.Inbox)}
}

// Attach makes in the inbox of agentID's new rows in this process, in place of any attached
// before (a stream that reconnected takes over from its predecessor). The returned func
// detaches it, once, and closes it; it returns the rows put but never taken, which the caller
// must make deliverable again. After Close, Attach attaches nothing.
func (h *Hub) Attach(agentID string, in *store.Inbox) func() []store.Delivery {
	h.mu.Lock()
	if !h.closed {
		h.inboxes[agentID] = in
	}
	h.mu.Unlock()
	var once sync.Once
	var left []store.Delivery
	return func() []store.Delivery {
		once.Do(func() {
			h.mu.Lock()
			if h.inboxes[agentID] == in {
				delete(h.inboxes, agentID)
			}
			h.mu.Unlock()
			left = in.Close()
		})
		return left
	}
}

// Inbox returns the inbox attached for agentID, or nil.
func (h *Hub) Inbox(agentID string) *store.Inbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inboxes[agentID]
}

// Subscribe registers a subscription for agentID. The returned channel has a buffer of one and
// receives a value on every Wake of agentID (coalesced: one pending value stands for any number
// of wake-ups). The subscription ends when the returned func is called or ctx is done; the
// channel is never closed, so a reader that still selects on it does not spin. After Close the
// channel never fires.
func (h *Hub) Subscribe(ctx context.Context, agentID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ch, func() {}
	}
	set := h.subs[agentID]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.subs[agentID] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()

	var once sync.Once
	remove := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if set := h.subs[agentID]; set != nil {
				delete(set, ch)
				if len(set) == 0 {
					delete(h.subs, agentID)
				}
			}
		})
	}
	// Tie the subscription to ctx too, so a caller that forgets cancel does not leak it.
	stop := context.AfterFunc(ctx, remove)
	return ch, func() {
		stop()
		remove()
	}
}

// Wake signals every subscriber of agentID without blocking.
func (h *Hub) Wake(agentID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[agentID] {
		notify(ch)
	}
}

// WakeAll signals every subscriber of every agent once; used when wake-ups may have been missed.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for ch := range set {
			notify(ch)
		}
	}
}

// Len returns the number of live subscriptions (for tests and metrics).
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.subs {
		n += len(set)
	}
	return n
}

// Close drops every subscription; later Subscribe calls get channels that never fire.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	clear(h.subs)
	clear(h.inboxes)
}

// notify performs the non-blocking send: a full buffer already holds a pending wake-up, which
// is all a subscriber needs, so the sender (often a database notification loop) never stalls.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
