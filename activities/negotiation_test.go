package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// orderLog records, in order, when an artifact was stored and when events were admitted.
type orderLog struct {
	mu  sync.Mutex
	log []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, s)
}

// slowArtifacts stores artifacts after a delay, as a busy database commits them.
type slowArtifacts struct {
	store.Artifacts
	o *orderLog
}

func (a slowArtifacts) AppendArtifact(ctx context.Context, art store.Artifact) error {
	time.Sleep(50 * time.Millisecond)
	err := a.Artifacts.AppendArtifact(ctx, art)
	a.o.add("artifact " + art.Kind + "/" + art.Version)
	return err
}

// loggedMessages notes each admission batch.
type loggedMessages struct {
	store.MessagePlane
	o *orderLog
}

func (m loggedMessages) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) []store.AdmitResult {
	m.o.add("events")
	return m.MessagePlane.AdmitBatch(ctx, reqs)
}

// orderedStore is the memory store with those two wrappers.
type orderedStore struct {
	store.Store
	o *orderLog
}

func (s orderedStore) Artifacts() store.Artifacts { return slowArtifacts{s.Store.Artifacts(), s.o} }
func (s orderedStore) Messages() store.MessagePlane {
	return loggedMessages{s.Store.Messages(), s.o}
}

// TestPublishNegotiationStoresTheDecisionBeforeItsEvent: a participant told decide reads
// the DecisionReport at once, so a batch that ends the negotiation stores its artifacts
// before any event is admitted; a round's batch writes both at once, in either order.
func TestPublishNegotiationStoresTheDecisionBeforeItsEvent(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want []string
	}{
		{"decide", []string{"artifact decision/final", "events"}},
		{"abort", []string{"artifact decision/final", "events"}},
		{"propose", nil}, // both, in either order
	} {
		t.Run(tc.kind, func(t *testing.T) {
			mem := memory.New()
			t.Cleanup(mem.Close)
			o := &orderLog{}
			st := orderedStore{Store: mem, o: o}
			require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
				Descriptor: &registrypb.AgentDescriptor{AgentId: "buyer", Name: "buyer"}, State: commonpb.AgentState_RUNNABLE}))
			sink := audit.New(nil, st.Audit())
			a := &Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink}
			err := a.PublishNegotiation(t.Context(), NegotiationPublishInput{NegotiationID: "neg-1", Recipients: []string{"buyer"},
				Events:    []NegotiationEvent{{Seq: 7, Kind: tc.kind, JSON: []byte(`{"kind":"` + tc.kind + `","seq":7}`)}},
				Artifacts: []NegotiationArtifact{{Kind: "decision", Version: "final", ContentType: "application/json", Content: []byte(`{}`)}}})
			require.NoError(t, err)
			if tc.want == nil {
				assert.ElementsMatch(t, []string{"events", "artifact decision/final"}, o.log)
				return
			}
			assert.Equal(t, tc.want, o.log)
		})
	}
}
