package dag

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// fuzzDefinition reads a definition from text: nodes separated by ";", each
// "key=node_id/agent_id/trigger:dep,dep>out,out" (every part after key optional; node_id
// defaults to key, agent_id to "agent"), so that the fuzzer reaches every rule.
func fuzzDefinition(src string) *workflowpb.WorkflowDefinition {
	def := &workflowpb.WorkflowDefinition{WorkflowId: "fuzz", Nodes: map[string]*workflowpb.WorkflowNode{}}
	for _, spec := range strings.Split(src, ";") {
		spec, outs, _ := strings.Cut(spec, ">")
		spec, deps, hasDeps := strings.Cut(spec, ":")
		key, rest, _ := strings.Cut(spec, "=")
		parts := strings.SplitN(rest, "/", 3)
		node := &workflowpb.WorkflowNode{NodeId: key, AgentId: "agent"}
		if len(parts) > 0 && parts[0] != "" {
			node.NodeId = parts[0]
		}
		if len(parts) > 1 {
			node.AgentId = parts[1]
		}
		if len(parts) > 2 {
			switch parts[2] {
			case "M":
				node.TriggerType = workflowpb.TriggerType_MANUAL
			case "E":
				node.TriggerType = workflowpb.TriggerType_EVENT
			case "S":
				node.TriggerType = workflowpb.TriggerType_SCHEDULE
				node.Metadata = map[string]string{MetaSchedule: "@hourly"}
			case "X":
				node.TriggerType = 9
			}
		}
		if hasDeps {
			node.Dependencies = strings.Split(deps, ",")
		}
		if outs != "" {
			node.OutputMapping = map[string]string{}
			for i, o := range strings.Split(outs, ",") {
				node.OutputMapping[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = o
			}
		}
		def.Nodes[key] = node
	}
	return def
}

// FuzzValidate: Validate never panics; it answers a topological order of every node, a
// cycle that is one, or a validation_error.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{
		"a", "a;b:a;c:a;d:b,c", "a:b;b:a", "r;a:r,c;b:a;c:b", "a:a", "a;b:ghost", "a;b:a,a",
		"a>/k;b>/k", "a>/k;b:a>/k/x", "a>/k,/k/z", "a=b;b", "a=;b", "a/-bad", "a//M;b:a", "a//X",
		"a//E;b:a;c", "r>/o;x:r>/o/x;y:r>/o/y;j:x,y>/o", "a>~;b>/~2", "=;:;>",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		def := fuzzDefinition(src)
		res, err := Validate(def)
		var ce *CycleError
		var pe *protocol.Error
		switch {
		case err == nil:
			assertTopological(t, def, res.Order)
			if len(res.Roots) == 0 {
				t.Fatal("accepted without a root")
			}
			if len(def.Nodes) <= 40 {
				assertNoWriteConflict(t, def)
			}
		case errors.As(err, &ce):
			assertCycle(t, def, ce.Nodes)
		case errors.As(err, &pe):
			if !strings.HasPrefix(err.Error(), "validation_error: ") {
				t.Fatalf("error %q", err)
			}
		default:
			t.Fatalf("unexpected error %T %v", err, err)
		}
		_ = Mermaid(def, nil)
		_ = DOT(def, nil)
	})
}

// assertNoWriteConflict checks an accepted definition the slow way: every two overlapping
// output targets belong to nodes one of which is an ancestor of the other.
func assertNoWriteConflict(t *testing.T, def *workflowpb.WorkflowDefinition) {
	t.Helper()
	var ancestor func(a, b string, seen map[string]bool) bool // a is an ancestor of b
	ancestor = func(a, b string, seen map[string]bool) bool {
		for _, d := range def.Nodes[b].GetDependencies() {
			if d == a || !seen[d] && func() bool { seen[d] = true; return ancestor(a, d, seen) }() {
				return true
			}
		}
		return false
	}
	overlap := func(x, y string) bool {
		px, _ := parseRef(x)
		py, _ := parseRef(y)
		if len(px) > len(py) {
			px, py = py, px
		}
		return slices.Equal(px, py[:len(px)])
	}
	type w struct{ node, target string }
	var ws []w
	for k, n := range def.Nodes {
		for _, tg := range n.GetOutputMapping() {
			ws = append(ws, w{k, tg})
		}
	}
	for i := range ws {
		for j := range i {
			a, b := ws[i], ws[j]
			if !overlap(a.target, b.target) {
				continue
			}
			if a.node == b.node {
				t.Fatalf("node %q writes %q and %q, accepted", a.node, a.target, b.target)
			}
			if !ancestor(a.node, b.node, map[string]bool{}) && !ancestor(b.node, a.node, map[string]bool{}) {
				t.Fatalf("unordered %q (%q) and %q (%q) accepted", a.node, a.target, b.node, b.target)
			}
		}
	}
}
