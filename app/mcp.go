package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
)

// MCPImportTimeout bounds the import of one configured MCP server: connecting (a stdio
// server's start included) and listing its tools.
const MCPImportTimeout = 30 * time.Second

// ImportMCPProviders imports the tools of each configured MCP server (SW4RM_MCP_SERVERS) and
// registers them as a provider of kind "mcp" (§18.1). A server that cannot be reached or
// listed is logged and skipped, not fatal: the frontend serves without its tools, and the
// next start tries again. Tools the server lists but that are no valid descriptors are
// logged and left out. A stdio server is started for the listing and stopped after it — a
// per-worktree one in an empty directory (mcp.ImportProvider), and its tools are marked
// needs_worktree.
func ImportMCPProviders(ctx context.Context, providers []mcp.Provider, st store.ToolProviders, sink *audit.Sink, log *slog.Logger) {
	for _, p := range providers {
		importMCPProvider(ctx, p, st, sink, log)
	}
}

func importMCPProvider(ctx context.Context, p mcp.Provider, st store.ToolProviders, sink *audit.Sink, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, MCPImportTimeout)
	defer cancel()
	log = log.With("provider_id", p.ID)
	imp, err := mcp.ImportProvider(ctx, p)
	if err != nil {
		log.Warn("MCP provider not imported: cannot connect or list its tools; its tools are not offered", "err", err)
		return
	}
	for _, s := range imp.Skipped {
		log.Warn("MCP tool skipped: not a valid descriptor", "tool", s.Name, "reason", s.Reason)
	}
	if err := st.RegisterProvider(ctx, p.ID, tool.ProviderKindMCP, imp.Tools, protocol.SchedulerID); err != nil {
		log.Warn("MCP provider not imported: cannot store its tools", "err", err)
		return
	}
	names := make([]string, len(imp.Tools))
	for i, d := range imp.Tools {
		names[i] = d.GetToolName()
	}
	log.Info("MCP provider imported", "tools", len(imp.Tools), "skipped", len(imp.Skipped))
	if sink != nil {
		sink.Record(ctx, audit.Event{Actor: protocol.SchedulerID, Type: frontend.AuditToolProviderRegistered,
			Details: map[string]any{"provider_id": p.ID, "kind": tool.ProviderKindMCP, "tools": names}})
	}
}
