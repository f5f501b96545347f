package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	id := req.GetProviderId()
	if err := tool.ValidateProviderID(id); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", toolMsg(err))
	}
	tools := req.GetTools()
	switch {
	case len(tools) == 0:
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"tools is empty: a provider advertises at least one tool descriptor (§18.1)")
	case len(tools) > tool.MaxToolsPerProvider:
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"%d tools is more than the %d one provider may register", len(tools), tool.MaxToolsPerProvider)
	}
	by := auth.FromContext(ctx).String()
	names := make([]string, len(tools))
	for i, d := range tools {
		names[i] = d.GetToolName()
	}
	if reasons := descriptorReasons(tools); len(reasons) > 0 {
		reason := "validation_error: " + strings.Join(reasons, "; ")
		c.audit(ctx, by, AuditToolProviderRefused, map[string]any{"provider_id": id, "tools": names, "reason": reason})
		return &connectorpb.ProviderRegisterResponse{Ok: false, Reason: reason}, nil
	}
	current, err := c.s.store.ToolProviders().ListTools(ctx, id)
	if err != nil {
		return nil, failed("read the provider's tools", err)
	}
	if len(current) > 0 && current[0].Kind == tool.ProviderKindMCP {
		return nil, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"provider %q is a configured MCP server: its tools come from its tools/list, not from RegisterProvider", id)
	}
	if err := c.s.store.ToolProviders().RegisterProvider(ctx, id, tool.ProviderKindConnector, tools, by); err != nil {
		return nil, failed("store the provider's tools", err)
	}
	c.audit(ctx, by, AuditToolProviderRegistered, map[string]any{"provider_id": id, "kind": tool.ProviderKindConnector, "tools": names})
	return &connectorpb.ProviderRegisterResponse{Ok: true}, nil
}

// DescribeTools answers the descriptors of one provider, sorted by tool_name. An unknown
// provider (or one that offers no tools) answers NotFound with no_route.
func (c *connectorService) DescribeTools(ctx context.Context, req *connectorpb.DescribeToolsRequest) (*connectorpb.DescribeToolsResponse, error) {
	id := req.GetProviderId()
	if err := tool.ValidateProviderID(id); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", toolMsg(err))
	}
	recs, err := c.s.store.ToolProviders().ListTools(ctx, id)
	if err != nil {
		return nil, failed("list the provider's tools", err)
	}
	if len(recs) == 0 {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no tool provider %q is registered, or it offers no tools", id)
	}
	out := make([]*connectorpb.ToolDescriptor, len(recs))
	for i, r := range recs {
		out[i] = r.Descriptor
	}
	return &connectorpb.DescribeToolsResponse{Tools: out}, nil
}

// descriptorReasons lists what is wrong with each descriptor, in request order: the
// descriptor rules (tool.ValidateDescriptor) and a tool_name given twice. None is nil.
func descriptorReasons(tools []*connectorpb.ToolDescriptor) []string {
	var reasons []string
	var seen []string
	for i, d := range tools {
		if err := tool.ValidateDescriptor(d); err != nil {
			reasons = append(reasons, fmt.Sprintf("tools[%d]: %s", i, toolMsg(err)))
			continue
		}
		if slices.Contains(seen, d.GetToolName()) {
			reasons = append(reasons, fmt.Sprintf("tools[%d]: tool_name %q is given twice", i, d.GetToolName()))
			continue
		}
		seen = append(seen, d.GetToolName())
	}
	return reasons
}

// toolMsg is a tool rule's message without its code prefix: the frontend's answer carries
// its own (validation_error), and "VALIDATION_ERROR: " inside it would say it twice.
func toolMsg(err error) string {
	var te *tool.Error
	if errors.As(err, &te) {
		return te.Msg
	}
	return err.Error()
}

// audit records a provider event with the proven caller as actor.
func (c *connectorService) audit(ctx context.Context, by, typ string, details map[string]any) {
	if c.s.sink == nil {
		return
	}
	c.s.sink.Record(ctx, audit.Event{Actor: by, Type: typ, Details: details})
}
