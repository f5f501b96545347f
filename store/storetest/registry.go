package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

func descriptor(agentID string) *registrypb.AgentDescriptor {
	return &registrypb.AgentDescriptor{
		AgentId:             agentID,
		Name:                "Agent " + agentID,
		Description:         "a test agent",
		Capabilities:        []string{"plan", "code"},
		CommunicationClass:  commonpb.CommunicationClass_STANDARD,
		ModalitiesSupported: []string{"application/json"},
		PublicKey:           []byte{1, 2, 3},
	}
}

// runRegistry checks the agent registry projection (§14).
func runRegistry(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutGetReplace", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		registered := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
		beat := registered.Add(time.Minute)
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{
			Descriptor:    descriptor("a1"),
			State:         commonpb.AgentState_RUNNABLE,
			Health:        map[string]string{"cpu": "ok", "mem": "high"},
			RegisteredAt:  registered,
			LastHeartbeat: beat,
		}))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.Equal(t, commonpb.AgentState_RUNNABLE, got.State)
		require.Equal(t, map[string]string{"cpu": "ok", "mem": "high"}, got.Health)
		require.True(t, registered.Equal(got.RegisteredAt), "registered_at %v, want %v", got.RegisteredAt, registered)
		require.True(t, beat.Equal(got.LastHeartbeat), "last_heartbeat %v, want %v", got.LastHeartbeat, beat)

		// Re-registration replaces the record; a zero RegisteredAt means "now".
		desc := descriptor("a1")
		desc.Name = "renamed"
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: desc, State: commonpb.AgentState_INITIALIZING}))
		got, err = reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, desc, got.Descriptor)
		require.Equal(t, commonpb.AgentState_INITIALIZING, got.State)
		require.Empty(t, got.Health)
		requireRecent(t, got.RegisteredAt)
		require.True(t, got.LastHeartbeat.IsZero(), "never sent a heartbeat")

		_, err = reg.GetAgent(ctx, "unknown")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Error(t, reg.PutAgent(ctx, store.AgentRecord{}), "a descriptor is required")
		require.Error(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: &registrypb.AgentDescriptor{}}), "an agent_id is required")
	})

	t.Run("ListOrderedByAgentID", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		// Byte order: upper case sorts before lower case, "a-2" before "a1".
		for _, id := range []string{"c", "a1", "B", "a-2", "b"} {
			require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor(id)}))
		}
		list, err = reg.ListAgents(ctx)
		require.NoError(t, err)
		var ids []string
		for _, rec := range list {
			ids = append(ids, rec.Descriptor.GetAgentId())
		}
		require.Equal(t, []string{"B", "a-2", "a1", "b", "c"}, ids)
	})

	t.Run("Delete", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a1")}))
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a2")}))
		removed, err := reg.DeleteAgent(ctx, "a1")
		require.NoError(t, err)
		require.True(t, removed)
		removed, err = reg.DeleteAgent(ctx, "a1")
		require.NoError(t, err)
		require.False(t, removed)
		_, err = reg.GetAgent(ctx, "a1")
		require.ErrorIs(t, err, store.ErrNotFound)
		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "a2", list[0].Descriptor.GetAgentId())
	})

	t.Run("RecordHeartbeat", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{
			Descriptor: descriptor("a1"), State: commonpb.AgentState_RUNNING, Health: map[string]string{"old": "1"},
		}))
		at := time.Date(2025, 6, 7, 8, 9, 10, 500000000, time.UTC)
		require.NoError(t, reg.RecordHeartbeat(ctx, "a1", map[string]string{"load": "0.5"}, at))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.True(t, at.Equal(got.LastHeartbeat), "last_heartbeat %v, want %v", got.LastHeartbeat, at)
		require.Equal(t, map[string]string{"load": "0.5"}, got.Health)
		require.Equal(t, commonpb.AgentState_RUNNING, got.State, "a heartbeat does not change the state")
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)

		err = reg.RecordHeartbeat(ctx, "unknown", nil, at)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SetAgentState", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a1"), State: commonpb.AgentState_RUNNABLE}))
		require.NoError(t, reg.SetAgentState(ctx, "a1", commonpb.AgentState_SUSPENDED))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_SUSPENDED, got.State)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.ErrorIs(t, reg.SetAgentState(ctx, "unknown", commonpb.AgentState_RUNNING), store.ErrNotFound)
	})
}
