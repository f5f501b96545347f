package loadgen

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// newPattern returns the implementation of p, accounting on l.
func newPattern(p Pattern, l *ledger) pattern {
	switch p {
	case Messages:
		return &messages{l: l, delivered: map[string]map[string]bool{}, confirmed: map[string]bool{}}
	case Tasks:
		return &tasks{l: l}
	case DAG:
		return &dags{l: l}
	case Handoffs:
		return &handoffs{l: l}
	case Negotiations:
		return &negotiations{l: l}
	case Tools:
		return &toolCalls{l: l}
	default:
		return &hitls{l: l}
	}
}

// messageBody is the payload of a generated message: the operation it belongs to.
type messageBody struct {
	Op string `json:"loadgen_op"`
}

// messages is the Messages pattern: producer → consumer.
type messages struct {
	l        *ledger
	producer *sdk.Agent
	consumer *sdk.Agent

	mu sync.Mutex
	// delivered are the message_ids each operation was delivered under; confirmed the
	// message_ids whose confirmation the server recorded.
	delivered map[string]map[string]bool
	confirmed map[string]bool
}

func (m *messages) setup(ctx context.Context, r *runner) error {
	var err error
	if m.consumer, err = r.agent(ctx, "msg-consumer", nil); err != nil {
		return err
	}
	if m.producer, err = r.agent(ctx, "msg-producer", nil); err != nil {
		return err
	}
	// The producer reads its inbox too: the ACKs of what it sent arrive there, and the SDK
	// re-sends a message the router NACKs TIMED_OUT from it (§11.2).
	r.read(ctx, m.producer, nil, nil)
	r.read(ctx, m.consumer, m.delivery, m.recorded)
	return nil
}

// delivery records a delivery to the consumer.
func (m *messages) delivery(d *sdk.Delivery) {
	var b messageBody
	if d.Envelope.GetMessageType() != commonpb.MessageType_DATA || d.DecodeJSON(&b) != nil || b.Op == "" {
		return
	}
	m.record(b.Op, d.Envelope.GetMessageId())
}

// record accounts for operation op delivered under message_id id.
func (m *messages) record(op, id string) {
	m.mu.Lock()
	ids := m.delivered[op]
	if ids == nil {
		ids = map[string]bool{}
		m.delivered[op] = ids
	}
	// Delivered under a second message_id (an earlier attempt and its retry both admitted),
	// or again after its confirmation was recorded: the application saw it twice.
	again := (len(ids) > 0 && !ids[id]) || m.confirmed[id]
	ids[id] = true
	m.mu.Unlock()
	if again {
		m.l.double(op)
	}
	if m.l.get(op) != nil {
		m.l.complete(op)
	}
}

// recorded notes a delivery whose confirmation the server recorded.
func (m *messages) recorded(d *sdk.Delivery) {
	m.mu.Lock()
	m.confirmed[d.Envelope.GetMessageId()] = true
	m.mu.Unlock()
}

func (m *messages) op(ctx context.Context, id string) {
	o := m.l.start(id)
	body, _ := json.Marshal(messageBody{Op: id})
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		_, err := m.producer.Send(actx, sdk.Message{To: m.consumer.ID(), Payload: body, IdempotencyToken: id, RetryCount: uint32(attempt)})
		cancel()
		code := sdk.CodeOf(err)
		done := false
		switch {
		case err == nil, code == commonpb.ErrorCode_ALREADY_IN_PROGRESS, code == commonpb.ErrorCode_DUPLICATE_DETECTED:
			m.l.ack(id)
			done = true
		case code == commonpb.ErrorCode_BUFFER_FULL:
			// The consumer is behind: wait and send again with the same token.
			m.l.note("buffer_full", 1)
		case code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED:
			m.l.note("refused_"+code.String(), 1)
			m.l.refuse(id)
			return
		default:
			m.l.errored()
		}
		if done {
			break
		}
		if attempt == 0 {
			m.l.retried()
		}
		if !sleep(ctx, backoff(attempt)) {
			return
		}
	}
	select {
	case <-o.done:
	case <-ctx.Done():
	}
}
