package store

import (
	"sync"
	"time"
)

// Inbox receives the rows a store hands straight to a stream attached with
// MessagePlane.Attach, instead of waking it to claim them: an admission that finds its
// recipient attached in the same process, and nothing else of the recipient's deliverable,
// stores its row already leased to that stream and puts it here once it is durable. It
// saves a stream the claim and the notification per row that are most of the time between
// a row's commit and its delivery.
//
// An Inbox never blocks the writer: Put queues, and Ready fires (coalesced) while rows wait.
// Its zero value is not usable; stores make one with NewInbox.
type Inbox struct {
	// Lease is how long a row handed to this inbox stays leased, as a Claim's lease.
	Lease time.Duration

	mu     sync.Mutex
	rows   []Delivery
	ready  chan struct{}
	closed bool
}

// NewInbox returns an empty inbox whose rows are leased for lease.
func NewInbox(lease time.Duration) *Inbox {
	return &Inbox{Lease: lease, ready: make(chan struct{}, 1)}
}

// Ready receives a value whenever rows are waiting to be taken (one pending value stands for
// any number of rows); it is never closed.
func (in *Inbox) Ready() <-chan struct{} { return in.ready }

// Take returns the waiting rows in the order they were put, and empties the inbox.
func (in *Inbox) Take() []Delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	rows := in.rows
	in.rows = nil
	return rows
}

// Put hands d to the inbox's stream and reports true, or false when the inbox was closed (its
// stream detached): the store must then make d deliverable again itself.
func (in *Inbox) Put(d Delivery) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return false
	}
	in.rows = append(in.rows, d)
	select {
	case in.ready <- struct{}{}:
	default:
	}
	return true
}

// Close stops the inbox taking rows and returns those put but never taken, which the store
// makes deliverable again.
func (in *Inbox) Close() []Delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	rows := in.rows
	in.rows = nil
	return rows
}
