package mcp

import (
	"fmt"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// Provider is one MCP server the deployment configures as a tool provider, under the
// provider_id its tools are registered with.
type Provider struct {
	// ID is the provider_id.
	ID string
	// Server says how to reach it.
	Server Server
}

// ParseProviders reads SW4RM_MCP_SERVERS: providers separated by ";", each
// "<provider_id>=stdio:<command line>" (the command line split on spaces, no quoting) or
// "<provider_id>=<http or https URL>" (streamable HTTP). Empty means none. Provider ids
// follow tool.ValidateProviderID and are unique.
func ParseProviders(v string) ([]Provider, error) {
	var out []Provider
	seen := map[string]bool{}
	for part := range strings.SplitSeq(v, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, target, ok := strings.Cut(part, "=")
		id, target = strings.TrimSpace(id), strings.TrimSpace(target)
		if !ok || target == "" {
			return nil, fmt.Errorf("%q: want provider_id=stdio:command args... or provider_id=http://url", part)
		}
		if err := tool.ValidateProviderID(id); err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("provider %q is configured twice", id)
		}
		seen[id] = true
		var s Server
		switch {
		case strings.HasPrefix(target, "stdio:"):
			s.Command = strings.Fields(strings.TrimPrefix(target, "stdio:"))
			if len(s.Command) == 0 {
				return nil, fmt.Errorf("%q: stdio: names no command", part)
			}
		case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
			s.URL = target
		default:
			return nil, fmt.Errorf("%q: the server is neither stdio:<command line> nor an http or https URL", part)
		}
		out = append(out, Provider{ID: id, Server: s})
	}
	return out, nil
}
