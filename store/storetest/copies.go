package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// runCopies checks that no sub-store aliases what its caller passed in or got back.
func runCopies(t *testing.T, newStore func(t *testing.T) store.Store) {
	runEnvelopeCopies(t, newStore)
	runRecordCopies(t, newStore)
}

// runEnvelopeCopies checks that the message plane keeps and hands out its own copies of
// envelopes.
func runEnvelopeCopies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Envelopes", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		env := Envelope("m1")
		seq, err := mp.Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: "bob", Track: true})
		require.NoError(t, err)
		// The caller's envelope is not aliased.
		env.Payload[0] = 'X'
		env.ProducerId = "mallory"

		ds := claim(t, mp, "bob", 1, time.Hour)
		require.Len(t, ds, 1)
		requireProtoEqual(t, Envelope("m1"), ds[0].Envelope)
		ds[0].Envelope.Payload[0] = 'Y'
		ds[0].Envelope.CorrelationId = "changed"

		rec, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		requireProtoEqual(t, Envelope("m1"), rec.Envelope)
		rec.Envelope.Payload[0] = 'Z'
		rec.Envelope.MessageId = "changed"

		again, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		requireProtoEqual(t, Envelope("m1"), again.Envelope)
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		ds = claim(t, mp, "bob", 1, time.Hour)
		require.Len(t, ds, 1)
		requireProtoEqual(t, Envelope("m1"), ds[0].Envelope)
		d, ok, err := mp.Confirm(ctx, "bob", seq, "m1")
		require.NoError(t, err)
		require.True(t, ok)
		requireProtoEqual(t, Envelope("m1"), d.Envelope)
	})
}

// runRecordCopies checks the same of the registry, audit, artifact and HITL records.
func runRecordCopies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RegistryRecords", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		desc := descriptor("a1")
		health := map[string]string{"cpu": "ok"}
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: desc, Health: health}))
		desc.Name = "changed"
		desc.Capabilities[0] = "changed"
		health["cpu"] = "changed"

		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.Equal(t, map[string]string{"cpu": "ok"}, got.Health)
		got.Descriptor.Name = "changed"
		got.Health["cpu"] = "changed"

		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		requireProtoEqual(t, descriptor("a1"), list[0].Descriptor)
		require.Equal(t, map[string]string{"cpu": "ok"}, list[0].Health)

		hb := map[string]string{"load": "low"}
		require.NoError(t, reg.RecordHeartbeat(ctx, "a1", hb, time.Now()))
		hb["load"] = "changed"
		got, err = reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"load": "low"}, got.Health)
	})

	t.Run("AuditAndArtifacts", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		details := []byte(`{"k":"v"}`)
		e, err := s.Audit().Append(ctx, store.Event{Type: "x", Details: details})
		require.NoError(t, err)
		details[2] = 'X'
		e.Details[2] = 'Y'
		events, err := s.Audit().List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.JSONEq(t, `{"k":"v"}`, string(events[0].Details))

		content := []byte("proposal body")
		require.NoError(t, s.Artifacts().AppendArtifact(ctx, store.Artifact{NegotiationID: "n1", Kind: "proposal", Version: "1", Content: content}))
		content[0] = 'X'
		arts, err := s.Artifacts().ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		require.Len(t, arts, 1)
		require.Equal(t, "proposal body", string(arts[0].Content))
		arts[0].Content[0] = 'Y'
		arts, err = s.Artifacts().ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		require.Equal(t, "proposal body", string(arts[0].Content))
	})

	t.Run("HITLRecords", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		rec := hitlRecord("i1", "SECURITY_APPROVAL", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		require.NoError(t, h.PutInvocation(ctx, rec))
		// The caller's slice is not aliased.
		rec.Invocation[2] = 'X'

		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		got.Invocation[2] = 'Y'
		list, err := h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, `{"invocation_id":"i1"}`, string(list[0].Invocation))
		list[0].Invocation[2] = 'Z'

		outcome := []byte(`{"decision":"approve"}`)
		require.NoError(t, h.CompleteInvocation(ctx, "i1", outcome, time.Now()))
		outcome[2] = 'X'
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
		got.Outcome[2] = 'Y'
		list, err = h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, `{"decision":"approve"}`, string(list[0].Outcome))
		list[0].Outcome[2] = 'Z'
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
		// The stored outcome was copied too: the original bytes still complete idempotently.
		require.NoError(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"approve"}`), time.Now()))
	})
}
