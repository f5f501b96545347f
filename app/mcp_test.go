package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
)

// TestImportMCPProviders: a configured MCP server's tools are registered as a provider of
// kind "mcp" and audited; an invalid tool is left out; an unreachable server is skipped
// without stopping the others.
func TestImportMCPProviders(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1"}, nil)
	noop := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	readNote := &sdk.Tool{Name: "read_note", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}
	srv.AddTool(readNote, noop)
	srv.AddTool(&sdk.Tool{Name: "bad/name", InputSchema: json.RawMessage(`{"type":"object"}`)}, nil)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(down.Close)

	providers, err := mcp.ParseProviders("down=" + down.URL + ";notes=" + hs.URL)
	require.NoError(t, err)
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	sink := audit.New(log, st.Audit())
	app.ImportMCPProviders(t.Context(), providers, st.ToolProviders(), sink, log)

	recs, err := st.ToolProviders().ListTools(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, recs, 1, "the unreachable server and the invalid tool are left out")
	assert.Equal(t, "notes", recs[0].ProviderID)
	assert.Equal(t, tool.ProviderKindMCP, recs[0].Kind)
	assert.Equal(t, "read_note", recs[0].Descriptor.GetToolName())
	assert.Equal(t, string(tool.SideEffectsRead), recs[0].Descriptor.GetSideEffects())

	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: frontend.AuditToolProviderRegistered})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, "scheduler", evs[0].Actor)
	assert.JSONEq(t, `{"provider_id":"notes","kind":"mcp","tools":["read_note"]}`, string(evs[0].Details))
}

// TestMCPServersFromEnv: SW4RM_MCP_SERVERS is read as it is (mcp.ParseProviders checks it
// when a server starts).
func TestMCPServersFromEnv(t *testing.T) {
	t.Setenv("SW4RM_MCP_SERVERS", "fs=stdio:server /srv")
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	assert.Equal(t, "fs=stdio:server /srv", cfg.MCPServers)
}
