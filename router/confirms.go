package router

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// confirmLinger is how long the writer waits after a confirmation of control traffic before it
// writes, so that the confirmations of a busy frontend share one statement. Nobody waits on
// it: the agent has its answer already, and the row only stays in the store's count of the
// buffer that much longer.
const confirmLinger = 2 * time.Millisecond

// controlConfirms answers AckDelivery for control traffic (forwarded ACKs, NACKs,
// notifications: untracked rows whose confirmation moves no lifecycle) from what this
// frontend's streams delivered, and writes the confirmations behind, many per statement
// (store.MessagePlane.ConfirmBatch). A producer receives two such rows per message it sends,
// so confirming each in its own round trip was about a quarter of the store's statements
// under a message flood (docs/benchmarks.md).
//
// The answer is the one the store would give: recorded=true for a row this frontend's stream
// delivered to that agent and nobody confirmed yet; recorded=false for a second confirmation
// of it, or a mismatched message_id. Anything the streams here did not deliver — another
// frontend's row, a row delivered before a restart, a seq that never existed — goes to the
// store as before. A confirmation is exactly as durable as before: the store wrote control
// confirmations without waiting for the disk already, and a lost one only means the row is
// delivered again. Before a stream of an agent releases its old leases (Stream), every pending
// confirmation is written, so a reconnecting agent is not handed what it confirmed.
//
// Deferral runs only while Router.Run runs the writer; otherwise every confirmation goes to
// the store.
type controlConfirms struct {
	mu sync.Mutex
	// active is set while the writer runs.
	active bool
	// rows are the control rows this frontend's streams delivered and that are not yet written
	// as confirmed.
	rows map[store.DeliveryRef]*controlRow
	// pending are the confirmed rows to write, in the order they were confirmed.
	pending []store.DeliveryRef
	kick    chan struct{}
	// writing serializes writes, so that flush returns only after every confirmation taken
	// before it is written.
	writing sync.Mutex
}

type controlRow struct {
	messageID string
	// stream is the delivering stream; its end forgets the row unless it was confirmed.
	stream uint64
	// confirmed marks a row whose confirmation is answered and waits to be written.
	confirmed bool
}

// deliveryKey is a row's map key: agent and seq (the message_id is checked separately).
func deliveryKey(agentID string, seq int64) store.DeliveryRef {
	return store.DeliveryRef{AgentID: agentID, Seq: seq}
}

// track records a control row that stream is about to deliver to agentID. A redelivery keeps
// an existing row's confirmation.
func (c *controlConfirms) track(stream uint64, agentID string, d store.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active {
		return
	}
	k := deliveryKey(agentID, d.Seq)
	if row, ok := c.rows[k]; ok {
		if !row.confirmed {
			row.stream = stream
		}
		return
	}
	c.rows[k] = &controlRow{messageID: d.Envelope.GetMessageId(), stream: stream}
}

// take answers a confirmation of (agentID, seq) when this frontend delivered the row: handled
// reports whether it did, recorded is then the answer.
func (c *controlConfirms) take(agentID string, seq int64, messageID string) (handled, recorded bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	row, ok := c.rows[deliveryKey(agentID, seq)]
	if !c.active || !ok {
		return false, false
	}
	if row.confirmed || (messageID != "" && messageID != row.messageID) {
		return true, false
	}
	row.confirmed = true
	c.pending = append(c.pending, deliveryKey(agentID, seq))
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return true, true
}

// drop forgets an unconfirmed row whose confirmation goes to the store after all (a permanent
// failure), so that a later confirmation of it is answered by the store too.
func (c *controlConfirms) drop(agentID string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if row, ok := c.rows[deliveryKey(agentID, seq)]; ok && !row.confirmed {
		delete(c.rows, deliveryKey(agentID, seq))
	}
}

// forget drops the unconfirmed rows a stream delivered, once it ends: a confirmation that
// arrives later goes to the store.
func (c *controlConfirms) forget(stream uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, row := range c.rows {
		if row.stream == stream && !row.confirmed {
			delete(c.rows, k)
		}
	}
}

// flush writes every pending confirmation. A failed write is logged: its rows stay
// unconfirmed in the store and are delivered again, as after a crash.
func (c *controlConfirms) flush(ctx context.Context, st store.MessagePlane) {
	c.writing.Lock()
	defer c.writing.Unlock()
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if _, err := st.ConfirmBatch(ctx, batch); err != nil {
		slog.Default().Warn("writing control confirmations failed; their rows will be delivered again", "rows", len(batch), "error", err)
	}
	c.mu.Lock()
	for _, k := range batch {
		delete(c.rows, k)
	}
	c.mu.Unlock()
}

// run is the writer: it writes confirmations confirmLinger after they arrive, until ctx ends,
// then stops deferring and writes what is left.
func (c *controlConfirms) run(ctx context.Context, st store.MessagePlane) {
	c.mu.Lock()
	c.active, c.rows, c.kick = true, map[store.DeliveryRef]*controlRow{}, make(chan struct{}, 1)
	kick := c.kick
	c.mu.Unlock()
	for {
		select {
		case <-kick:
			select {
			case <-time.After(confirmLinger):
			case <-ctx.Done():
			}
			c.flush(context.WithoutCancel(ctx), st)
		case <-ctx.Done():
			c.mu.Lock()
			c.active = false
			c.mu.Unlock()
			// Bounded: a store that is gone must not hold up shutdown; what is not written is
			// delivered again.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			c.flush(fctx, st)
			cancel()
			return
		}
	}
}
