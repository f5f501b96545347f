package frontend

import (
	"context"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// Audit event types of ConnectorService.
const (
	// AuditToolProviderRegistered records a provider's stored descriptor set.
	AuditToolProviderRegistered = "tool.provider_registered"
	// AuditToolProviderRefused records a registration refused by the descriptor rules.
	AuditToolProviderRefused = "tool.provider_refused"
)

// connectorService serves sw4rm.connector.ConnectorService: tool providers advertise their
// tools (§18.1: "Providers MUST advertise tool metadata and schemas") and anyone proven lists
// them, kept in store.ToolProviders.
//
// Who may register (frontend/authz.go): an operator, for any provider_id, or an agent for
// the provider_id equal to its own agent_id — an agent advertises its own tools and never
// another's. A provider that is a configured MCP server (kind "mcp") is the deployment's:
// it is refused over this RPC, so that no caller can shadow what the operator configured.
//
// Refusals: a request without provider_id or without tools is malformed and answers
// InvalidArgument with validation_error. A well-formed request whose descriptors break
// tool.ValidateDescriptor's rules answers status OK with ok=false and a reason that starts
// with "validation_error: " and names every bad descriptor, since the response has ok and
// reason fields for exactly that; nothing is stored, and the refusal is audited too.
type connectorService struct {
	connectorpb.UnimplementedConnectorServiceServer
	s *Server
}

// RegisterProvider validates every descriptor and replaces the provider's tool set with
// them (§18.1): afterwards the provider offers exactly these tools.
func (c *connectorService) RegisterProvider(ctx context.Context, req *connectorpb.ProviderRegisterRequest) (*connectorpb.ProviderRegisterResponse, error) {
	if perr := tool.ValidateRegistration(req); perr != nil {
		return nil, perr
	}
	id, tools, by := req.GetProviderId(), req.GetTools(), auth.FromContext(ctx).String()
	if reasons := tool.DescriptorReasons(tools); len(reasons) > 0 {
		reason := "validation_error: " + strings.Join(reasons, "; ")
		c.audit(ctx, by, AuditToolProviderRefused, map[string]any{"provider_id": id, "tools": toolNames(tools), "reason": reason})
		return &connectorpb.ProviderRegisterResponse{Ok: false, Reason: reason}, nil
	}
	if err := c.register(ctx, id, tools, by); err != nil {
		return nil, err
	}
	c.audit(ctx, by, AuditToolProviderRegistered, map[string]any{"provider_id": id, "kind": tool.ProviderKindConnector, "tools": toolNames(tools)})
	return &connectorpb.ProviderRegisterResponse{Ok: true}, nil
}

// register replaces the provider's tool set, unless the provider is a configured MCP server.
func (c *connectorService) register(ctx context.Context, id string, tools []*connectorpb.ToolDescriptor, by string) error {
	current, err := c.s.store.ToolProviders().ListTools(ctx, id)
	if err != nil {
		return failed("read the provider's tools", err)
	}
	if len(current) > 0 && current[0].Kind == tool.ProviderKindMCP {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"provider %q is a configured MCP server: its tools come from its tools/list, not from RegisterProvider", id)
	}
	if err := c.s.store.ToolProviders().RegisterProvider(ctx, id, tool.ProviderKindConnector, tools, by); err != nil {
		return failed("store the provider's tools", err)
	}
	return nil
}

// toolNames lists the descriptors' tool names, in order, for the audit.
func toolNames(tools []*connectorpb.ToolDescriptor) []string {
	names := make([]string, len(tools))
	for i, d := range tools {
		names[i] = d.GetToolName()
	}
	return names
}

// DescribeTools answers the descriptors of one provider, sorted by tool_name. An unknown
// provider (or one that offers no tools) answers NotFound with no_route.
func (c *connectorService) DescribeTools(ctx context.Context, req *connectorpb.DescribeToolsRequest) (*connectorpb.DescribeToolsResponse, error) {
	if perr := tool.ValidateDescribe(req); perr != nil {
		return nil, perr
	}
	recs, err := c.s.store.ToolProviders().ListTools(ctx, req.GetProviderId())
	if err != nil {
		return nil, failed("list the provider's tools", err)
	}
	if len(recs) == 0 {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no tool provider %q is registered, or it offers no tools", req.GetProviderId())
	}
	out := make([]*connectorpb.ToolDescriptor, len(recs))
	for i, r := range recs {
		out[i] = r.Descriptor
	}
	return &connectorpb.DescribeToolsResponse{Tools: out}, nil
}

// audit records a provider event with the proven caller as actor.
func (c *connectorService) audit(ctx context.Context, by, typ string, details map[string]any) {
	if c.s.sink == nil {
		return
	}
	c.s.sink.Record(ctx, audit.Event{Actor: by, Type: typ, Details: details})
}
