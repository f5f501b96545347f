package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests ToolProviders: a provider's descriptor set replaced whole, listings sorted
// by provider then tool, lookups, refusals that change nothing, copies, and that concurrent
// registrations of one provider never leave a mix of two sets (§18.1).

// testDescriptor is a descriptor with every field set.
func testDescriptor(name string) *connectorpb.ToolDescriptor {
	return &connectorpb.ToolDescriptor{
		ToolName:        name,
		InputSchema:     `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
		OutputSchema:    `{"type": "object"}`,
		Idempotent:      true,
		NeedsWorktree:   true,
		DefaultTimeoutS: 30,
		MaxConcurrency:  4,
		SideEffects:     "read",
	}
}

// toolKeys names each record "provider/tool", in the order given.
func toolKeys(rs []store.ToolRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ProviderID + "/" + r.Descriptor.GetToolName()
	}
	return out
}

func listToolKeys(t *testing.T, p store.ToolProviders, providerID string) []string {
	t.Helper()
	rs, err := p.ListTools(t.Context(), providerID)
	require.NoError(t, err)
	require.NotNil(t, rs, "none is an empty slice")
	return toolKeys(rs)
}

func runToolProviders(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RegisterListGet", func(t *testing.T) {
		p := newStore(t).ToolProviders()
		ctx := t.Context()
		require.Empty(t, listToolKeys(t, p, ""))
		require.Empty(t, listToolKeys(t, p, "fs"), "an unknown provider has no tools")
		_, err := p.GetTool(ctx, "fs", "read_file")
		require.ErrorIs(t, err, store.ErrNotFound)

		before := time.Now().Add(-time.Second)
		fs := []*connectorpb.ToolDescriptor{testDescriptor("write_file"), testDescriptor("read_file"), {ToolName: "Zed", InputSchema: `{}`}}
		require.NoError(t, p.RegisterProvider(ctx, "fs", "mcp", fs, "operator:ops"))
		require.NoError(t, p.RegisterProvider(ctx, "agent-b", "agent", []*connectorpb.ToolDescriptor{testDescriptor("search")}, "agent:agent-b"))
		require.NoError(t, p.RegisterProvider(ctx, "Alpha", "agent", []*connectorpb.ToolDescriptor{testDescriptor("x")}, "agent:Alpha"))

		require.Equal(t, []string{"Alpha/x", "agent-b/search", "fs/Zed", "fs/read_file", "fs/write_file"},
			listToolKeys(t, p, ""), "sorted by provider then tool, byte order")
		require.Equal(t, []string{"fs/Zed", "fs/read_file", "fs/write_file"}, listToolKeys(t, p, "fs"))
		require.Equal(t, []string{"agent-b/search"}, listToolKeys(t, p, "agent-b"))
		require.Empty(t, listToolKeys(t, p, "FS"), "provider ids are case-sensitive")

		got, err := p.GetTool(ctx, "fs", "read_file")
		require.NoError(t, err)
		requireProtoEqual(t, testDescriptor("read_file"), got.Descriptor)
		require.Equal(t, "fs", got.ProviderID)
		require.Equal(t, "mcp", got.Kind)
		require.Equal(t, "operator:ops", got.RegisteredBy)
		require.True(t, got.RegisteredAt.After(before) && got.RegisteredAt.Before(time.Now().Add(time.Second)), "registered_at %v", got.RegisteredAt)
		_, err = p.GetTool(ctx, "agent-b", "read_file")
		require.ErrorIs(t, err, store.ErrNotFound, "a tool belongs to its provider")

		// Copies both ways.
		fs[1].DefaultTimeoutS = 1
		got.Descriptor.SideEffects = "external"
		listed, err := p.ListTools(ctx, "fs")
		require.NoError(t, err)
		listed[1].Descriptor.MaxConcurrency = 99
		again, err := p.GetTool(ctx, "fs", "read_file")
		require.NoError(t, err)
		requireProtoEqual(t, testDescriptor("read_file"), again.Descriptor)

		// Registering again replaces the provider's set and only that provider's.
		require.NoError(t, p.RegisterProvider(ctx, "fs", "mcp", []*connectorpb.ToolDescriptor{testDescriptor("list_dir")}, "operator:other"))
		require.Equal(t, []string{"Alpha/x", "agent-b/search", "fs/list_dir"}, listToolKeys(t, p, ""))
		_, err = p.GetTool(ctx, "fs", "read_file")
		require.ErrorIs(t, err, store.ErrNotFound)
		got, err = p.GetTool(ctx, "fs", "list_dir")
		require.NoError(t, err)
		require.Equal(t, "operator:other", got.RegisteredBy)

		// Refused registrations change nothing.
		for name, bad := range map[string][]*connectorpb.ToolDescriptor{
			"duplicate name": {testDescriptor("a"), testDescriptor("b"), testDescriptor("a")},
			"empty name":     {testDescriptor("a"), {InputSchema: `{}`}},
			"nil descriptor": {testDescriptor("a"), nil},
		} {
			require.Error(t, p.RegisterProvider(ctx, "fs", "mcp", bad, "operator:ops"), name)
			require.Equal(t, []string{"fs/list_dir"}, listToolKeys(t, p, "fs"), name)
		}
		require.Error(t, p.RegisterProvider(ctx, "", "agent", []*connectorpb.ToolDescriptor{testDescriptor("a")}, "operator:ops"), "no provider id")
		require.Equal(t, []string{"Alpha/x", "agent-b/search", "fs/list_dir"}, listToolKeys(t, p, ""))

		// An empty set leaves the provider with no tools.
		require.NoError(t, p.RegisterProvider(ctx, "fs", "mcp", nil, "operator:ops"))
		require.Empty(t, listToolKeys(t, p, "fs"))
		require.Equal(t, []string{"Alpha/x", "agent-b/search"}, listToolKeys(t, p, ""))
	})

	t.Run("ConcurrentRegistrationsNeverMix", func(t *testing.T) {
		p := newStore(t).ToolProviders()
		ctx := t.Context()
		sets := [][]*connectorpb.ToolDescriptor{
			{testDescriptor("a1"), testDescriptor("a2"), testDescriptor("a3")},
			{testDescriptor("b1"), testDescriptor("b2")},
			{testDescriptor("a1"), testDescriptor("b1")}, // shares names with both
		}
		valid := map[string]bool{fmt.Sprint([]string{}): true} // before the first registration
		for _, set := range sets {
			keys := make([]string, len(set))
			for i, d := range set {
				keys[i] = "p/" + d.GetToolName()
			}
			valid[fmt.Sprint(keys)] = true
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 3 {
			wg.Go(func() {
				for i := range 15 {
					if err := p.RegisterProvider(ctx, "p", "agent", sets[(w+i)%len(sets)], fmt.Sprintf("writer-%d", w)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for range 2 {
			wg.Go(func() {
				for range 30 {
					rs, err := p.ListTools(ctx, "p")
					if err != nil {
						errs <- err
						return
					}
					if keys := toolKeys(rs); !valid[fmt.Sprint(keys)] {
						errs <- fmt.Errorf("a reader saw a mix of two sets: %v", keys)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.True(t, valid[fmt.Sprint(listToolKeys(t, p, "p"))], "the last registration stands whole")
	})
}
