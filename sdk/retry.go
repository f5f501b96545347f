package sdk

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// DefaultMaxRetries is how many times an agent re-sends a timed-out message unless told
// otherwise: the server's default retry budget (SW4RM_MAX_RETRIES, §21.1), after which the
// server dead-letters the message instead of asking for another attempt.
const DefaultMaxRetries = 3

// maxTracked bounds the messages an agent remembers for a retry; past it the oldest is
// forgotten and, should it time out, not retried. Messages are forgotten as soon as they are
// RECEIVED, so only those still waiting in a recipient's buffer count.
const maxTracked = 1024

// retrySendTimeout bounds the re-send Stream.Next makes for a TIMED_OUT NACK.
const retrySendTimeout = 10 * time.Second

// retrier performs the producer's side of §11.2 and App. D C.2: it remembers the messages
// sent with an idempotency token until they are RECEIVED, and answers the TIMED_OUT NACK of
// one by sending it again with the same token, a new message_id and retry_count+1.
type retrier struct {
	mu    sync.Mutex
	max   int
	sent  map[string]tracked // by message_id
	order []string           // message_ids, oldest first (some may be forgotten already)
}

// tracked is a message sent and not yet RECEIVED, with its recipient.
type tracked struct {
	env *commonpb.Envelope
	to  string
}

func newRetrier() *retrier {
	return &retrier{max: DefaultMaxRetries, sent: map[string]tracked{}}
}

// SetMaxRetries sets how many times the agent re-sends a message it sent with Send and an
// idempotency token when the server NACKs it TIMED_OUT (§11: not RECEIVED within the ACK
// timeout): each retry has the same token, a new message_id and retry_count+1 (§11.2,
// §11.3), counting from the message's RetryCount. Zero or less turns the retry off. The
// default is DefaultMaxRetries. The NACK arrives on the agent's inbound stream, so only an
// agent that reads its stream (Receive, Serve) retries; Stream.Next makes the retry and
// reports it on the NACK's Delivery (Retry, RetryErr). Requests (Message.ResponseTimeout) are
// not retried here: the server re-sends them itself (004).
func (a *Agent) SetMaxRetries(n int) {
	a.retry.mu.Lock()
	defer a.retry.mu.Unlock()
	a.retry.max = max(n, 0)
}

// track remembers env, about to be sent to to, if it is to be retried.
func (r *retrier) track(env *commonpb.Envelope, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.max == 0 || env.GetIdempotencyToken() == "" || int(env.GetRetryCount()) >= r.max {
		return
	}
	r.sent[env.GetMessageId()] = tracked{env: env, to: to}
	r.order = append(r.order, env.GetMessageId())
	if len(r.order) > 2*maxTracked { // drop the ids of messages forgotten since
		r.order = slices.DeleteFunc(r.order, func(id string) bool { _, ok := r.sent[id]; return !ok })
	}
	for len(r.sent) > maxTracked {
		delete(r.sent, r.order[0])
		r.order = r.order[1:]
	}
}

// forget drops a message: it was RECEIVED, rejected, or its send failed.
func (r *retrier) forget(messageID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sent, messageID)
}

// onAck applies an ACK or NACK the agent received. For the router's TIMED_OUT NACK of a
// tracked message it returns the retry it sent (and why that failed, if it did); any other
// ACK ends the message's tracking, since only a message not yet RECEIVED can time out.
func (r *retrier) onAck(ctx context.Context, a *Agent, from string, p protocol.AckPayload) (*commonpb.Envelope, error) {
	r.mu.Lock()
	t, ok := r.sent[p.AckForMessageID]
	delete(r.sent, p.AckForMessageID)
	limit := r.max
	r.mu.Unlock()
	if !ok || from != protocol.SchedulerID || p.Stage != commonpb.AckStage_TIMED_OUT || int(t.env.GetRetryCount()) >= limit {
		return nil, nil
	}
	retry := proto.Clone(t.env).(*commonpb.Envelope)
	retry.MessageId = uuid.NewString()
	retry.RetryCount++
	retry.SequenceNumber = a.seq.Add(1)
	r.track(retry, t.to)
	ctx, cancel := context.WithTimeout(ctx, retrySendTimeout)
	defer cancel()
	if err := a.SendEnvelope(ctx, retry, t.to); err != nil {
		r.forget(retry.GetMessageId())
		return retry, err
	}
	return retry, nil
}
