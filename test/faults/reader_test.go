package faults

import (
	"context"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// streamReader reads an agent's stream again and again until its context ends: a broken
// stream, a handler that gives up or a reset opens a new stream, which redelivers first what
// the agent had not confirmed — exactly what a fault must not lose.
type streamReader struct {
	agent *sdk.Agent
	// reset, when it receives, ends the current stream so that the next one opens.
	reset chan struct{}
	// mu guards streams, which counts the streams opened.
	mu      *sync.Mutex
	streams *int
	// handle takes one delivery; false ends the stream.
	handle func(ctx context.Context, d *sdk.Delivery) bool
}

// start reads until ctx ends; the returned function waits for the reader to stop.
func (r streamReader) start(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			r.stream(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() { <-done }
}

// stream reads one stream until it fails, the handler gives up or a reset is asked for.
func (r streamReader) stream(ctx context.Context) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := r.agent.Receive(sctx)
	if err != nil {
		return
	}
	r.mu.Lock()
	*r.streams++
	r.mu.Unlock()
	go func() {
		select {
		case <-r.reset:
			cancel()
		case <-sctx.Done():
		}
	}()
	for {
		d, err := st.Next()
		if err != nil {
			return
		}
		if !r.handle(sctx, d) {
			return
		}
	}
}
