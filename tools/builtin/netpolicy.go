package builtin

import (
	"errors"
	"os"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// netPlan is the network a process.run call's process gets (§18.5.2), decided by
// planNetwork before anything starts:
//   - DENY_ALL: a network namespace of its own with nothing in it;
//   - EGRESS_RESTRICTED, EGRESS_UNRESTRICTED: a namespace of its own whose only way out is
//     the call's egressProxy, restricted to the allowlist or not;
//   - FULL_ACCESS: the host's network (the call workflow had it approved first).
type netPlan struct {
	policy  tool.NetworkPolicy
	isolate bool
	// proxy is the namespace's only way out; nil under DENY_ALL and FULL_ACCESS.
	proxy *egressProxy

	// Set while the process runs (netns_linux.go).
	parent  *os.File      // the worker's end of the socket pair the init hands its listener over
	started bool          // start ran: done will close
	done    chan struct{} // closed once the proxy served its last connection
	setup   error         // why the namespace's proxy front could not be set up
}

// planNetwork decides the network of a process.run call from its network_policy; an unknown
// policy is VALIDATION_ERROR, and EGRESS_RESTRICTED with an empty allowlist is
// PERMISSION_DENIED, since nothing would be reachable and the caller should know why.
func (p *Provider) planNetwork(req tools.Request) (*netPlan, error) {
	switch req.Policy.Network {
	case "", tool.NetworkDenyAll:
		return &netPlan{policy: tool.NetworkDenyAll, isolate: true}, nil
	case tool.NetworkEgressRestricted:
		if len(p.opts.EgressAllow) == 0 {
			return nil, tool.Errorf(tool.CodePermissionDenied,
				"tool %q: network_policy EGRESS_RESTRICTED allows only the deployment's egress allowlist (SW4RM_TOOL_EGRESS_ALLOW), and it is empty; ask for DENY_ALL, or have the operator allowlist the hosts the call needs", req.ToolName)
		}
		return &netPlan{policy: req.Policy.Network, isolate: true, proxy: newEgressProxy(true, p.opts.EgressAllow)}, nil
	case tool.NetworkEgressUnrestricted:
		return &netPlan{policy: req.Policy.Network, isolate: true, proxy: newEgressProxy(false, nil)}, nil
	case tool.NetworkFullAccess:
		return &netPlan{policy: req.Policy.Network}, nil
	}
	return nil, tool.Errorf(tool.CodeValidation, "tool %q: network_policy %q is not one of %v", req.ToolName, req.Policy.Network, tool.NetworkPolicies())
}

// finish ends the plan once the process ended, and says what the call's outcome is: a
// namespace whose proxy front could not be set up is PERMISSION_DENIED (the program never
// ran); a program that failed after the proxy refused it a connection is PERMISSION_DENIED
// naming what was refused, since the refusal is the likely cause; otherwise the outcome
// stands.
func (n *netPlan) finish(req tools.Request, res tools.Result, err error) (tools.Result, error) {
	n.close()
	if n.setup != nil {
		return tools.Result{}, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: network_policy %s cannot be enforced here: the proxy in the process's network namespace could not be set up (%v), so the program was not run", req.ToolName, n.policy, n.setup)
	}
	var te *tool.Error
	if n.proxy != nil && errors.As(err, &te) && te.Code == tool.CodeToolFailed {
		if refused := n.proxy.refused(); len(refused) > 0 {
			return tools.Result{}, tool.Errorf(tool.CodePermissionDenied,
				"tool %q: network_policy %s: the egress proxy refused %s; then %s", req.ToolName, n.policy, strings.Join(refused, "; "), te.Msg)
		}
	}
	return res, err
}
