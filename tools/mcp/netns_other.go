//go:build !linux

package mcp

import (
	"os/exec"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// isolateNetwork refuses: network namespaces are Linux's, and a server declared DENY_ALL is
// not run with the host's network.
func isolateNetwork(*exec.Cmd) error {
	return tool.Errorf(tool.CodePermissionDenied, "an MCP server declared network=DENY_ALL runs in a network namespace of its own, which needs Linux")
}
