package acl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
)

// FuzzParse: Parse never panics; whatever it accepts validates, survives a JSON round trip
// unchanged (as a workflow's input does), marshals to a document Parse reads back the same,
// and decides every request the same way before and after.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "acl.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, seed := range []string{
		`{}`,
		`{"default": "allow", "rules": []}`,
		`{"version": 1, "rules": [{"name": "n", "effect": "deny", "agents": ["a*"], "capabilities": ["c?"], "send": ["CONTROL"], "receive": ["*"], "tools": ["t*"], "providers": ["p"], "scopes": ["repo:*"]}]}`,
		`{"rules": [{"effect": "allow", "agents": ["*"], "send": []}]}`,
		`{"rules": [{"effect": "allow", "agents": ["b*"], "tools": ["process.run"], "max_execution_policy": {"network_policy": "DENY_ALL", "privilege_level": "DEFAULT"}}]}`,
		`{"rules": []} {}`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	requests := []acl.Request{
		{Agent: "a1", Action: acl.SendMessage, MessageType: commonpb.MessageType_CONTROL},
		{Agent: "planner-1", Capabilities: []string{"c1", "review"}, Action: acl.ReceiveMessage, MessageType: commonpb.MessageType_DATA},
		{Agent: "coder-1", Action: acl.CallTool, Tool: "t1", Provider: "p"},
		{Agent: "b1", Action: acl.CallTool, Tool: "process.run", Provider: "builtin", NetworkPolicy: "FULL_ACCESS", PrivilegeLevel: "ELEVATED"},
		{Agent: "coder-1", Action: acl.AccessScope, Scope: acl.DAGScope("build")},
		{Agent: "coder-1", Action: acl.AccessScope, Scope: acl.Scope("core", "wt")},
		{Agent: "x", Action: "other"},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := acl.Parse(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a policy with error %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a policy Validate refuses: %v", err)
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var decoded acl.Policy
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, &decoded) {
			t.Fatalf("JSON round trip changed the policy:\n%+v\n%+v", p, &decoded)
		}
		reparsed, err := acl.Parse(raw)
		if err != nil {
			t.Fatalf("Parse refuses its own output %s: %v", raw, err)
		}
		if !reflect.DeepEqual(p, reparsed) {
			t.Fatalf("re-parsing changed the policy:\n%+v\n%+v", p, reparsed)
		}
		for _, r := range requests {
			d := p.Decide(r)
			if d != decoded.Decide(r) || d != p.Decide(r) {
				t.Fatalf("decisions differ for %+v", r)
			}
			if d.Rule < -1 || d.Rule >= len(p.Rules) || d.Reason == "" {
				t.Fatalf("bad decision %+v", d)
			}
		}
	})
}
