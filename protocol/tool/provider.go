package tool

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Provider kinds: how a tool provider came to be known (§18.1).
const (
	// ProviderKindConnector is a provider registered over ConnectorService.RegisterProvider —
	// typically an agent offering its own tools under its agent_id.
	ProviderKindConnector = "connector"
	// ProviderKindMCP is an MCP server the deployment configures; its tools/list is imported
	// at start.
	ProviderKindMCP = "mcp"
	// ProviderKindBuiltin is the built-in provider of confined file and process tools.
	ProviderKindBuiltin = "builtin"
)

// MaxToolsPerProvider bounds how many tools one provider registers: a listing travels in one
// response, and a provider with more is better split.
const MaxToolsPerProvider = 1024

// providerIDPattern is the shape of agent ids, since an agent registers its own tools under
// its agent_id; it keeps provider ids usable in workflow IDs and task-queue names.
var providerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// ValidateProviderID checks a provider_id: 1–128 characters of letters, digits and
// . _ : @ -, starting with a letter or digit (the shape of an agent_id).
func ValidateProviderID(id string) error {
	if id == "" {
		return Errorf(CodeValidation, "provider_id is required")
	}
	if !providerIDPattern.MatchString(id) {
		q := id
		if len(q) > 64 {
			q = q[:64] + "..."
		}
		return Errorf(CodeValidation, "provider_id %s must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", strconv.Quote(q))
	}
	return nil
}

// ResolveProvider names the provider of a call that gave only a tool name (the published
// SDKs call tools by name alone): offering lists the providers that offer the tool. One of
// them is the provider; none is NOT_FOUND; several is VALIDATION_ERROR naming them, since
// picking one would run the caller's arguments on a provider it did not choose.
func ResolveProvider(toolName string, offering []string) (string, error) {
	switch len(offering) {
	case 0:
		return "", Errorf(CodeNotFound, "no provider offers tool %s (ConnectorService.DescribeTools lists what is offered)", strconv.Quote(toolName))
	case 1:
		return offering[0], nil
	}
	sorted := slices.Clone(offering)
	slices.Sort(sorted)
	return "", Errorf(CodeValidation, "tool %s is offered by %d providers (%s): name one in provider_id",
		strconv.Quote(toolName), len(sorted), strings.Join(sorted, ", "))
}
