package dag

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// n builds a node: id, agent "agent-<id>", dependencies.
func n(id string, deps ...string) *workflowpb.WorkflowNode {
	return &workflowpb.WorkflowNode{NodeId: id, AgentId: "agent-" + id, Dependencies: deps}
}

// wf builds a definition keyed by node_id.
func wf(nodes ...*workflowpb.WorkflowNode) *workflowpb.WorkflowDefinition {
	d := &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{}}
	for _, x := range nodes {
		d.Nodes[x.GetNodeId()] = x
	}
	return d
}

func with(node *workflowpb.WorkflowNode, f func(*workflowpb.WorkflowNode)) *workflowpb.WorkflowNode {
	f(node)
	return node
}

func outputs(node *workflowpb.WorkflowNode, kv ...string) *workflowpb.WorkflowNode {
	node.OutputMapping = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		node.OutputMapping[kv[i]] = kv[i+1]
	}
	return node
}

func meta(node *workflowpb.WorkflowNode, kv ...string) *workflowpb.WorkflowNode {
	node.Metadata = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		node.Metadata[kv[i]] = kv[i+1]
	}
	return node
}

func TestValidateAccepts(t *testing.T) {
	diamond := wf(n("a"), n("b", "a"), n("c", "a"), n("d", "c", "b"))
	tests := []struct {
		name  string
		def   *workflowpb.WorkflowDefinition
		order []string
		roots []string
	}{
		{"single node", wf(n("only")), []string{"only"}, []string{"only"}},
		{"diamond", diamond, []string{"a", "b", "c", "d"}, []string{"a"}},
		// Ties go to the smallest node_id among the ready nodes, not to depth: z is ready
		// from the start, yet a's dependents b and c, ready later, are smaller and go first.
		{"ties by node_id", wf(n("z"), n("a"), n("c", "a"), n("b", "a")), []string{"a", "b", "c", "z"}, []string{"a", "z"}},
		{"order follows readiness", wf(n("b"), n("c"), n("a", "c")), []string{"b", "c", "a"}, []string{"b", "c"}},
		{"the spec's picture (000 §3.11.3)", wf(n("parse"), n("validate", "parse"), n("transform", "validate"), n("enrich", "validate"), n("aggregate", "transform", "enrich"), n("output", "aggregate")),
			[]string{"parse", "validate", "enrich", "transform", "aggregate", "output"}, []string{"parse"}},
		{"ordered writers of one key", wf(outputs(n("a"), "x", "/result"), outputs(n("b", "a"), "", "/result/sub"), outputs(n("c", "b"), "y", "result")),
			[]string{"a", "b", "c"}, []string{"a"}},
		{"ordered through a path, not an edge", wf(outputs(n("a"), "x", "/r"), n("m", "a"), outputs(n("z", "m"), "x", "/r")),
			[]string{"a", "m", "z"}, []string{"a"}},
		{"unordered writers of different keys", wf(n("a"), outputs(n("b", "a"), "x", "/out/b"), outputs(n("c", "a"), "x", "/out/c"), outputs(n("d", "a"), "x", "/outc")),
			[]string{"a", "b", "c", "d"}, []string{"a"}},
		{"schedule and skip_if", wf(meta(with(n("s"), func(x *workflowpb.WorkflowNode) { x.TriggerType = workflowpb.TriggerType_SCHEDULE }), MetaSchedule, "*/5 * * * *"), meta(n("t", "s"), MetaSkipIf, "/flags/skip~1t")),
			[]string{"s", "t"}, []string{"s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Validate(tt.def)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if fmt.Sprint(res.Order) != fmt.Sprint(tt.order) {
				t.Errorf("Order = %v, want %v", res.Order, tt.order)
			}
			if fmt.Sprint(res.Roots) != fmt.Sprint(tt.roots) {
				t.Errorf("Roots = %v, want %v", res.Roots, tt.roots)
			}
			if len(res.Warnings) != 0 {
				t.Errorf("Warnings = %v, want none", res.Warnings)
			}
		})
	}
}

func TestValidateRefuses(t *testing.T) {
	manyNodes := wf(n("a"), n("b", "a"))
	manyNodes.Nodes["c"] = n("b", "a") // key c, node_id b: b is claimed twice
	tests := []struct {
		name string
		def  *workflowpb.WorkflowDefinition
		want string // a substring of the message
	}{
		{"nil definition", nil, "workflow definition is required"},
		{"empty workflow_id", &workflowpb.WorkflowDefinition{Nodes: wf(n("a")).Nodes}, "workflow_id is required"},
		{"malformed workflow_id", &workflowpb.WorkflowDefinition{WorkflowId: "a b", Nodes: wf(n("a")).Nodes}, `workflow_id "a b" must be`},
		{"no nodes", &workflowpb.WorkflowDefinition{WorkflowId: "wf"}, "has no nodes, so no root node"},
		{"late_binding not a boolean", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: wf(n("a")).Nodes, Metadata: map[string]string{MetaLateBinding: "yes"}}, `late_binding="yes" must be "true" or "false"`},
		{"nil node", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{"a": nil}}, `node "a" is empty`},
		{"empty node_id", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{"a": {AgentId: "x"}}}, `node under key "a" has an empty node_id`},
		{"empty key and node_id", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{"": {AgentId: "x"}}}, "a node has an empty node_id"},
		{"empty key", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{"": n("a")}}, `node "a" is stored under an empty key`},
		{"key and node_id differ", &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{"a": n("x")}}, `node under key "a" has node_id "x"`},
		{"duplicate node_id", manyNodes, `duplicate node_id "b": the nodes under keys "b" and "c" both claim it`},
		{"malformed node_id", wf(n("a b")), `node_id "a b" must be`},
		{"missing agent_id", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.AgentId = "" })), `node "a" has no agent_id`},
		{"malformed agent_id", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.AgentId = "-x" })), `node "a": agent_id "-x" must be`},
		{"unknown trigger", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.TriggerType = 42 })), `node "a" has unknown trigger_type 42`},
		{"self-dependency (a self-loop)", wf(n("a"), n("b", "a", "b")), `node "b" depends on itself`},
		{"unknown dependency", wf(n("a"), n("b", "ghost")), `node "b" depends on unknown node "ghost"`},
		{"empty dependency", wf(n("a"), n("b", "")), `node "b" lists an empty dependency`},
		{"dependency twice", wf(n("a"), n("b", "a", "a")), `node "b" lists dependency "a" twice`},
		{"schedule missing", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.TriggerType = workflowpb.TriggerType_SCHEDULE })), `node "a" has trigger_type SCHEDULE but no metadata "schedule"`},
		{"schedule malformed", wf(meta(with(n("a"), func(x *workflowpb.WorkflowNode) { x.TriggerType = workflowpb.TriggerType_SCHEDULE }), MetaSchedule, "every tuesday")), `node "a": metadata schedule="every tuesday" is not a cron expression`},
		{"schedule on a DEPENDENCY node", wf(meta(n("a"), MetaSchedule, "@daily")), `node "a" has metadata "schedule" but trigger_type DEPENDENCY (unspecified)`},
		{"skip_if empty", wf(meta(n("a"), MetaSkipIf, "")), `node "a": metadata skip_if is empty`},
		{"after_skipped unknown", wf(n("a"), meta(n("b", "a"), MetaAfterSkipped, "true")), `node "b": metadata after_skipped="true" must be "skip"`},
		{"skip_if bad escape", wf(meta(n("a"), MetaSkipIf, "/a~2")), `"~" must be followed by 0 or 1`},
		{"input name empty", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.InputMapping = map[string]string{"": "/x"} })), `node "a": input_mapping has an empty input name`},
		{"input pointer bad", wf(with(n("a"), func(x *workflowpb.WorkflowNode) { x.InputMapping = map[string]string{"in": "/x~"} })), `node "a": input_mapping "in"`},
		{"output source bad", wf(outputs(n("a"), "/x~9", "/y")), `node "a": output_mapping source "/x~9"`},
		{"output target empty", wf(outputs(n("a"), "x", "")), `node "a": output_mapping "x" has an empty target`},
		{"output target bad", wf(outputs(n("a"), "x", "/~")), `node "a": output_mapping target "/~"`},
		{"siblings write the same key", wf(n("a"), outputs(n("b", "a"), "x", "/result"), outputs(n("c", "a"), "y", "result")),
			`nodes "b" and "c" both write workflow_data ("/result" and "result" overlap) but neither depends on the other`},
		{"siblings write overlapping keys", wf(n("a"), outputs(n("b", "a"), "x", "/result/b"), outputs(n("c", "a"), "y", "/result")),
			`nodes "b" and "c" both write workflow_data ("/result/b" and "/result" overlap)`},
		{"two roots write one key", wf(outputs(n("a"), "x", "/k"), outputs(n("b"), "x", "/k")), `nodes "a" and "b" both write`},
		{"a chain and a stranger", wf(outputs(n("a"), "x", "/k"), outputs(n("b", "a"), "x", "/k"), outputs(n("c"), "x", "/k/deep")), `nodes "b" and "c" both write`},
		{"one node writes overlapping targets", wf(outputs(n("a"), "x", "/k", "y", "/k/z")), `node "a" writes overlapping workflow_data targets "/k" and "/k/z"`},
		{"one node writes one target twice", wf(outputs(n("a"), "x", "/k", "y", "k")), `node "a" writes overlapping workflow_data targets`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Validate(tt.def)
			if err == nil {
				t.Fatalf("Validate accepted it: %+v", res)
			}
			var perr *protocol.Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %T %v, want *protocol.Error", err, err)
			}
			if perr.Code != commonpb.ErrorCode_VALIDATION_ERROR {
				t.Errorf("code %v, want VALIDATION_ERROR", perr.Code)
			}
			if !strings.HasPrefix(err.Error(), "validation_error: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want validation_error: …%s…", err, tt.want)
			}
		})
	}
}

func TestValidateCycles(t *testing.T) {
	tests := []struct {
		name string
		def  *workflowpb.WorkflowDefinition
		want []string
		msg  string
	}{
		{"two-cycle", wf(n("r"), n("a", "r", "b"), n("b", "a")), []string{"a", "b", "a"},
			"workflow_cycle_detected: nodes a → b → a form a cycle"},
		{"no root: everything in the cycle", wf(n("a", "c"), n("b", "a"), n("c", "b")), []string{"a", "b", "c", "a"},
			"workflow_cycle_detected: nodes a → b → c → a form a cycle"},
		// The tail (t1, t2 hang below the cycle; x feeds it) is not part of the answer,
		// even though the walk starts at the smallest unordered node, a tail node.
		{"long cycle with a tail", wf(n("root"), n("x", "root"), n("c1", "x", "c5"), n("c2", "c1"), n("c3", "c2"), n("c4", "c3"), n("c5", "c4"), n("a-tail", "c3"), n("t2", "a-tail")),
			[]string{"c1", "c2", "c3", "c4", "c5", "c1"}, "workflow_cycle_detected: nodes c1 → c2 → c3 → c4 → c5 → c1 form a cycle"},
		{"rotated to the smallest id", wf(n("r"), n("z", "r", "m"), n("m", "q"), n("q", "z")), []string{"m", "z", "q", "m"},
			"workflow_cycle_detected: nodes m → z → q → m form a cycle"},
		{"two cycles: the one of the smallest node", wf(n("r"), n("p", "r", "q"), n("q", "p"), n("b", "r", "c"), n("c", "b")), []string{"b", "c", "b"},
			"workflow_cycle_detected: nodes b → c → b form a cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Validate(tt.def)
			var ce *CycleError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v, want *CycleError", err, err)
			}
			if fmt.Sprint(ce.Nodes) != fmt.Sprint(tt.want) {
				t.Errorf("Nodes = %v, want %v", ce.Nodes, tt.want)
			}
			if err.Error() != tt.msg {
				t.Errorf("Error() = %q, want %q", err, tt.msg)
			}
			assertCycle(t, tt.def, ce.Nodes)
		})
	}
}

// assertCycle checks that nodes is a cycle of def: closed, and each node depends on the one
// before it.
func assertCycle(t *testing.T, def *workflowpb.WorkflowDefinition, nodes []string) {
	t.Helper()
	if len(nodes) < 3 || nodes[0] != nodes[len(nodes)-1] {
		t.Fatalf("cycle %v is not closed", nodes)
	}
	seen := map[string]bool{}
	for i := 1; i < len(nodes); i++ {
		if seen[nodes[i]] {
			t.Fatalf("cycle %v repeats %q", nodes, nodes[i])
		}
		seen[nodes[i]] = true
		dep := false
		for _, d := range def.GetNodes()[nodes[i]].GetDependencies() {
			dep = dep || d == nodes[i-1]
		}
		if !dep {
			t.Fatalf("cycle %v: %q does not depend on %q", nodes, nodes[i], nodes[i-1])
		}
	}
}

func TestCycleErrorShortensLongCycles(t *testing.T) {
	const size = 1000
	def := wf(n("root"))
	for i := range size {
		def.Nodes[id(i)] = n(id(i), id((i+size-1)%size))
	}
	def.Nodes[id(0)].Dependencies = append(def.Nodes[id(0)].Dependencies, "root")
	_, err := Validate(def)
	var ce *CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want *CycleError", err)
	}
	if len(ce.Nodes) != size+1 {
		t.Fatalf("cycle has %d nodes, want %d", len(ce.Nodes), size+1)
	}
	assertCycle(t, def, ce.Nodes)
	msg := err.Error()
	if !strings.Contains(msg, "… (969 more) …") || strings.Count(msg, "→") != maxCycleShown {
		t.Errorf("message not shortened as documented: %q", msg)
	}
}

func TestValidateWarnsUnreachable(t *testing.T) {
	trig := func(x *workflowpb.WorkflowNode, tt workflowpb.TriggerType) *workflowpb.WorkflowNode {
		x.TriggerType = tt
		return x
	}
	def := wf(
		n("start"), n("after", "start"),
		trig(n("approve"), workflowpb.TriggerType_MANUAL), n("ship", "approve"),
		trig(n("hook"), workflowpb.TriggerType_EVENT), n("both", "hook", "start"), // reached through start
		trig(n("gate", "start"), workflowpb.TriggerType_MANUAL), // a MANUAL node inside the run: not a root, reached
	)
	res, err := Validate(def)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`node "approve" is unreachable from the run's start: it is a root with trigger_type MANUAL and runs only when triggered`,
		`node "hook" is unreachable from the run's start: it is a root with trigger_type EVENT and runs only when triggered`,
		`node "ship" is unreachable from the run's start: every root it depends on waits for a MANUAL or EVENT trigger`,
	}
	if strings.Join(res.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("Warnings =\n%s\nwant\n%s", strings.Join(res.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

// The order is the same whatever Go's map iteration does: validate one definition many
// times.
func TestValidateDeterministic(t *testing.T) {
	def := wf()
	for i := range 200 {
		var deps []string
		for _, j := range []int{i / 2, i / 3, i - 7} {
			if j >= 0 && j < i && !contains(deps, id(j)) {
				deps = append(deps, id(j))
			}
		}
		def.Nodes[id(i)] = n(id(i), deps...)
	}
	first, err := Validate(def)
	if err != nil {
		t.Fatal(err)
	}
	assertTopological(t, def, first.Order)
	for range 20 {
		again, _ := Validate(def)
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatal("Validate answered differently for the same definition")
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func id(i int) string { return fmt.Sprintf("n%06d", i) }

// assertTopological checks that order holds every node once, each after its dependencies.
func assertTopological(t *testing.T, def *workflowpb.WorkflowDefinition, order []string) {
	t.Helper()
	if len(order) != len(def.GetNodes()) {
		t.Fatalf("order has %d nodes, the definition %d", len(order), len(def.GetNodes()))
	}
	at := make(map[string]int, len(order))
	for i, x := range order {
		if _, dup := at[x]; dup {
			t.Fatalf("order repeats %q", x)
		}
		at[x] = i
	}
	for k, node := range def.GetNodes() {
		for _, d := range node.GetDependencies() {
			if at[d] >= at[k] {
				t.Fatalf("%q comes before its dependency %q", k, d)
			}
		}
	}
}
