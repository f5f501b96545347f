package acl_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	tooldomain "github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

func callWith(agent, name, network, privilege string) acl.Request {
	return acl.Request{Agent: agent, Action: acl.CallTool, Tool: name, Provider: "builtin", NetworkPolicy: network, PrivilegeLevel: privilege}
}

// TestMaxExecutionPolicy: an allow rule with max_execution_policy allows the calls that ask
// at most its policy and denies, itself, the ones that ask more; a missing field in the
// request is the spec's default; an unknown value exceeds every limit.
func TestMaxExecutionPolicy(t *testing.T) {
	p := mustParse(t, `{"rules": [
		{"name": "builder", "effect": "allow", "agents": ["builder-*"], "tools": ["process.run"],
		 "max_execution_policy": {"network_policy": "DENY_ALL", "privilege_level": "DEFAULT"}},
		{"name": "fetcher", "effect": "allow", "agents": ["fetcher"], "tools": ["*"],
		 "max_execution_policy": {"network_policy": "EGRESS_RESTRICTED"}},
		{"name": "anything else", "effect": "allow", "agents": ["*"], "tools": ["*"]}
	]}`)
	tests := []struct {
		name    string
		request acl.Request
		allowed bool
		exceeds bool
		rule    int
	}{
		{"defaults are within", callWith("builder-1", "process.run", "", ""), true, false, 0},
		{"the limit itself", callWith("builder-1", "process.run", "DENY_ALL", "DEFAULT"), true, false, 0},
		{"wider network", callWith("builder-1", "process.run", "EGRESS_UNRESTRICTED", ""), false, true, 0},
		{"higher privilege", callWith("builder-1", "process.run", "DENY_ALL", "ELEVATED"), false, true, 0},
		{"unknown network fails closed", callWith("builder-1", "process.run", "SOMETIMES", ""), false, true, 0},
		{"unknown privilege fails closed", callWith("builder-1", "process.run", "", "ROOT"), false, true, 0},
		{"one field bounds only itself", callWith("fetcher", "fs.read", "EGRESS_RESTRICTED", "FULL_ACCESS"), true, false, 1},
		{"narrower is within", callWith("fetcher", "fs.read", "DENY_ALL", ""), true, false, 1},
		{"wider than the one field", callWith("fetcher", "fs.read", "FULL_ACCESS", ""), false, true, 1},
		{"a later rule does not rescue an exceeding call", callWith("builder-1", "process.run", "FULL_ACCESS", ""), false, true, 0},
		{"unbounded rule", callWith("other", "process.run", "FULL_ACCESS", "FULL_ACCESS"), true, false, 2},
		{"limits only tool calls", scope("builder-1", "dag:x"), false, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.request)
			assert.Equal(t, tc.allowed, d.Allowed, d.Reason)
			assert.Equal(t, tc.exceeds, d.Exceeds, d.Reason)
			assert.Equal(t, tc.rule, d.Rule, d.Reason)
		})
	}
	d := p.Decide(callWith("builder-1", "process.run", "EGRESS_UNRESTRICTED", "PRIVILEGED"))
	assert.Equal(t, `rule 0 "builder" allows builder-1 calling tool "process.run" of provider "builtin" but not with network_policy EGRESS_UNRESTRICTED (at most DENY_ALL) and privilege_level PRIVILEGED (at most DEFAULT)`, d.Reason)
	assert.Equal(t, "builder", p.RuleName(d))
	assert.Empty(t, p.RuleName(acl.Decision{Rule: -1}))
}

// TestMaxExecutionPolicyParse: the limit's validation and its JSON round trip.
func TestMaxExecutionPolicyParse(t *testing.T) {
	for doc, want := range map[string]string{
		`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"], "max_execution_policy": {"network_policy": "DENY_ALL"}}]}`: "without tools",
		`{"rules": [{"effect": "deny", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"network_policy": "DENY_ALL"}}]}`:    "on a deny rule",
		`{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {}}]}`:                               "bounds nothing",
		`{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"network_policy": "deny_all"}}]}`:   `network_policy "deny_all"`,
		`{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"privilege_level": "ROOT"}}]}`:      `privilege_level "ROOT"`,
	} {
		_, err := acl.Parse([]byte(doc))
		if assert.Error(t, err, doc) {
			assert.Contains(t, err.Error(), "rule 0: max_execution_policy: ", doc)
			assert.Contains(t, err.Error(), want, doc)
		}
	}
	_, err := acl.Parse([]byte(`{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"network": "DENY_ALL"}}]}`))
	assert.ErrorContains(t, err, `unknown field "network"`, "a misspelt key never widens access")
	p := mustParse(t, `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"privilege_level": "DEFAULT"}}]}`)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"version": 1, "default": "deny", "rules": [{"effect": "allow", "agents": ["*"], "tools": ["*"], "max_execution_policy": {"privilege_level": "DEFAULT"}}]}`, string(raw))
}

// TestLimitNamesMatchTheToolPolicy: the evaluator's orders of network policies and privilege
// levels are the tool path's (acl does not import it, to stay small and pure).
func TestLimitNamesMatchTheToolPolicy(t *testing.T) {
	var networks, levels []string
	for _, n := range tooldomain.NetworkPolicies() {
		networks = append(networks, string(n))
	}
	for _, l := range tooldomain.PrivilegeLevels() {
		levels = append(levels, l.String())
	}
	assert.Equal(t, networks, acl.NetworkPolicies())
	assert.Equal(t, levels, acl.PrivilegeLevels())
}

// TestResourceScopes: the names of the scopes the services decide.
func TestResourceScopes(t *testing.T) {
	assert.Equal(t, "dag:build", acl.DAGScope("build"))
	assert.Equal(t, "negotiation:n-1", acl.NegotiationScope("n-1"))
	assert.Equal(t, "tool_call:call-1", acl.ToolCallScope("call-1"))
}
