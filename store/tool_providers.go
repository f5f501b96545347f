package store

import (
	"context"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
)

// ToolRecord is one stored tool descriptor with the provider that offers it (§18.1).
type ToolRecord struct {
	// ProviderID is the provider's id: the provider_id of RegisterProvider, or the name of
	// a configured MCP server.
	ProviderID string
	// Kind says what the provider is ("agent" for one registered over ConnectorService,
	// "mcp" for a configured MCP server).
	Kind string
	// Descriptor is the tool's descriptor.
	Descriptor *connectorpb.ToolDescriptor
	// RegisteredBy is the principal that registered the provider's current set.
	RegisteredBy string
	// RegisteredAt is when the provider's current set was registered.
	RegisteredAt time.Time
}

// ToolProviders stores the tool providers and the descriptors they advertise (§18.1:
// "Providers MUST advertise tool metadata and schemas"; §22's MCP-like descriptors).
// Descriptors go in and come out as copies: changing a message after RegisterProvider, or
// one that a read returned, changes nothing stored.
//
// The store keeps what it is given: the frontend validates descriptors
// (tool.ValidateDescriptor) before it writes them. The store itself refuses only what it
// cannot keep: an empty provider id, a nil descriptor, a descriptor without tool_name and a
// tool_name given twice.
type ToolProviders interface {
	// RegisterProvider replaces the provider's descriptor set at once (atomic): afterwards
	// the provider offers exactly these tools, readers see the old set or the new one and
	// never a mix, and a refused call changes nothing. An empty set leaves the provider
	// with no tools. by is the principal that registered it.
	RegisterProvider(ctx context.Context, providerID, kind string, descriptors []*connectorpb.ToolDescriptor, by string) error
	// ListTools returns the provider's tools sorted by tool_name (byte order), or every
	// provider's tools sorted by provider_id then tool_name when providerID is empty. An
	// unknown provider has none: the answer is an empty slice.
	ListTools(ctx context.Context, providerID string) ([]ToolRecord, error)
	// GetTool returns one tool of one provider or ErrNotFound.
	GetTool(ctx context.Context, providerID, toolName string) (ToolRecord, error)
}
