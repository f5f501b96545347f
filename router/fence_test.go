package router

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// fakeHandoffs holds fences in memory and counts the lookups the router makes, so the tests
// can tell a check answered from the cache from one that went to the store.
type fakeHandoffs struct {
	store.Handoffs // nil: the router uses only the fence methods
	mu             sync.Mutex
	fences         map[fenceKey]store.Fence
	gen            int64
	lookups        atomic.Int64
}

func (h *fakeHandoffs) Fence(_ context.Context, f store.Fence) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fences == nil {
		h.fences = map[fenceKey]store.Fence{}
	}
	if _, ok := h.fences[fenceKey{f.Correlation, f.AgentID}]; !ok {
		h.fences[fenceKey{f.Correlation, f.AgentID}] = f
		h.gen++
	}
	return nil
}

func (h *fakeHandoffs) Fenced(_ context.Context, correlation, agentID string) (store.Fence, bool, error) {
	h.lookups.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.fences[fenceKey{correlation, agentID}]
	return f, ok, nil
}

func (h *fakeHandoffs) FencesGeneration(context.Context) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen, nil
}

// listingHandoffs is the fakeHandoffs the cache lists its fences from.
type listingHandoffs struct{ *fakeHandoffs }

func (h *fakeHandoffs) ListFences(context.Context) ([]store.Fence, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []store.Fence
	for _, f := range h.fences {
		out = append(out, f)
	}
	return out, nil
}

// handoffsStore is the memory store with h as its handoffs: the router's tests set fences
// directly, and the other tests do not depend on the store's handoff projection.
type handoffsStore struct {
	*memory.Store
	h store.Handoffs
}

func (s handoffsStore) Handoffs() store.Handoffs { return s.h }

// newTestStore is a memory store whose handoffs are a fakeHandoffs without fences.
func newTestStore() handoffsStore {
	return handoffsStore{Store: memory.New(), h: &fakeHandoffs{}}
}

func message(producer, correlation string) *commonpb.Envelope {
	return &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: producer, CorrelationId: correlation, SequenceNumber: uint64(time.Now().UnixNano()),
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2,
	}
}

// TestFencedProducerIsRefused: after p handed correlation C away, its messages on C are
// refused with permission_denied naming the new owner and the handoff, and NACKed; its
// messages on other correlations, and other producers' on C, pass.
func TestFencedProducerIsRefused(t *testing.T) {
	for name, lister := range map[string]bool{"listing store": true, "lookup store": false} {
		t.Run(name, func(t *testing.T) {
			fh := &fakeHandoffs{}
			st := handoffsStore{Store: memory.New(), h: fh}
			if lister {
				st.h = listingHandoffs{fh}
			}
			t.Cleanup(st.Close)
			r := sweepFixture(t, st, time.Minute)
			runSweeps(t, r)
			require.NoError(t, fh.Fence(t.Context(), store.Fence{Correlation: "C", AgentID: "p", RequestID: "h1", NewOwner: "c"}))

			// The probes go to an agent of their own, so that those admitted before the fence
			// arrives (a loaded machine) fill no buffer the test uses below; only the fence's
			// refusal ends the wait (a full sink answers buffer_full until then).
			require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
				Descriptor: &registrypb.AgentDescriptor{AgentId: "sink", Name: "sink"}, State: commonpb.AgentState_RUNNABLE,
			}))
			require.Eventually(t, func() bool {
				perr, err := r.Send(t.Context(), message("p", "C"), "sink")
				require.NoError(t, err)
				return perr != nil && perr.Code == commonpb.ErrorCode_PERMISSION_DENIED
			}, 5*time.Second, 10*time.Millisecond, "the fence reaches the router")
			env := message("p", "C")
			perr, err := r.Send(t.Context(), env, "c")
			require.NoError(t, err)
			require.NotNil(t, perr)
			assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, perr.Code)
			assert.Equal(t, "permission_denied: fenced: correlation C was handed to c by handoff h1 (§17.6)", perr.Error())
			rec, err := st.Messages().GetMessage(t.Context(), env.GetMessageId())
			if err == nil {
				assert.NotEqual(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State, "a fenced message is never admitted")
			}
			nacks, err := st.Messages().Claim(t.Context(), store.ClaimRequest{AgentID: "p", Limit: 100, Lease: time.Minute})
			require.NoError(t, err)
			found := false
			for _, d := range nacks {
				if p, perr := protocol.ParseAck(d.Envelope); perr == nil && p.AckForMessageID == env.GetMessageId() {
					found = p.ErrorCode == commonpb.ErrorCode_PERMISSION_DENIED && strings.Contains(p.Note, "fenced")
				}
			}
			assert.True(t, found, "the producer is NACKed with permission_denied")

			for _, ok := range []*commonpb.Envelope{message("p", "other"), message("c", "C")} {
				perr, err := r.Send(t.Context(), ok, map[string]string{"p": "c", "c": "p"}[ok.GetProducerId()])
				require.NoError(t, err)
				assert.Nil(t, perr, "%s on %s", ok.GetProducerId(), ok.GetCorrelationId())
			}
		})
	}
}

// TestFenceCacheKeepsTheStoreOffTheHotPath: with a fresh cache of a listing store no message
// costs a lookup; with a store that cannot list, the first message of a (correlation,
// producer) costs one and the next ones none until the generation changes; with a stale
// cache (Run not running) every message asks the store.
func TestFenceCacheKeepsTheStoreOffTheHotPath(t *testing.T) {
	ctx := t.Context()
	check := func(r *Router, corr string) {
		_, fenced, err := r.Fenced(ctx, corr, "p")
		require.NoError(t, err)
		require.False(t, fenced)
	}

	fh := &fakeHandoffs{}
	r := New(handoffsStore{Store: memory.New(), h: listingHandoffs{fh}}, Config{}, nil)
	require.NoError(t, r.refreshFences(ctx))
	for range 10 {
		check(r, uuid.NewString())
	}
	assert.Zero(t, fh.lookups.Load(), "a complete, fresh cache answers alone")
	require.NoError(t, fh.Fence(ctx, store.Fence{Correlation: "C", AgentID: "p", RequestID: "h", NewOwner: "q"}))
	require.NoError(t, r.refreshFences(ctx))
	_, fenced, err := r.Fenced(ctx, "C", "p")
	require.NoError(t, err)
	assert.True(t, fenced)
	assert.Zero(t, fh.lookups.Load())

	fh = &fakeHandoffs{}
	r = New(handoffsStore{Store: memory.New(), h: listingHandoffs{fh}}, Config{}, nil)
	check(r, "A")
	check(r, "A")
	assert.EqualValues(t, 2, fh.lookups.Load(), "a cache never refreshed is stale: the store answers")
	check(r, "")
	assert.EqualValues(t, 2, fh.lookups.Load(), "no correlation, no fence")
}
