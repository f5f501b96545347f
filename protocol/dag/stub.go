// TEMPORARY STUB — replaced at merge by the real package protocol/dag (validation, mapping,
// triggers and drawing, §17.7). It holds exactly the names the definitions slice calls —
// Result, CycleError, Validate, Mermaid and DOT — with the agreed signatures, doing the
// minimum: Kahn's algorithm with cycle detection and plain drawings. Delete this file when
// the real package lands.

// Package dag validates and draws DAG workflow definitions (§17.7).
package dag

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// Result is what validation learned of a definition.
type Result struct {
	// Order is a topological order (Kahn's algorithm, ties by node_id).
	Order []string
	// Roots are the nodes without dependencies, sorted.
	Roots []string
	// Warnings are sorted remarks that do not refuse the definition.
	Warnings []string
}

// CycleError reports a dependency cycle: Nodes are one cycle's nodes in order, the first
// repeated at the end.
type CycleError struct {
	// Nodes is the cycle, e.g. [a b c a].
	Nodes []string
}

// Error is "workflow_cycle_detected: nodes a → b → c → a form a cycle".
func (e *CycleError) Error() string {
	return "workflow_cycle_detected: nodes " + strings.Join(e.Nodes, " → ") + " form a cycle"
}

func invalid(format string, args ...any) error {
	return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, format, args...)
}

// Validate checks a definition (§17.7) and returns its order, a *CycleError or a
// *protocol.Error (validation_error).
func Validate(def *workflowpb.WorkflowDefinition) (Result, error) {
	if def.GetWorkflowId() == "" {
		return Result{}, invalid("workflow_id is required")
	}
	if len(def.GetNodes()) == 0 {
		return Result{}, invalid("a workflow needs at least one node")
	}
	ids := make([]string, 0, len(def.GetNodes()))
	for key, n := range def.GetNodes() {
		switch {
		case key == "" || n.GetNodeId() != key:
			return Result{}, invalid("node key %q and node_id %q differ", key, n.GetNodeId())
		case n.GetAgentId() == "":
			return Result{}, invalid("node %s has no agent_id", key)
		}
		ids = append(ids, key)
	}
	slices.Sort(ids)
	indeg := make(map[string]int, len(ids))
	dependents := make(map[string][]string, len(ids))
	var roots []string
	for _, id := range ids {
		for _, dep := range def.GetNodes()[id].GetDependencies() {
			if _, ok := def.GetNodes()[dep]; !ok {
				return Result{}, invalid("node %s depends on unknown node %s", id, dep)
			}
			if dep == id {
				return Result{}, invalid("node %s depends on itself", id)
			}
			indeg[id]++
			dependents[dep] = append(dependents[dep], id)
		}
		if indeg[id] == 0 {
			roots = append(roots, id)
		}
	}
	if len(roots) == 0 {
		return Result{}, invalid("no root node: every node has a dependency")
	}
	ready := slices.Clone(roots)
	order := make([]string, 0, len(ids))
	for len(ready) > 0 {
		slices.Sort(ready)
		id := ready[0]
		ready = ready[1:]
		order = append(order, id)
		for _, d := range dependents[id] {
			if indeg[d]--; indeg[d] == 0 {
				ready = append(ready, d)
			}
		}
	}
	if len(order) < len(ids) {
		return Result{}, &CycleError{Nodes: findCycle(def, indeg, ids)}
	}
	return Result{Order: order, Roots: roots, Warnings: []string{}}, nil
}

// findCycle walks dependencies among the nodes Kahn's algorithm left (indeg > 0) until a
// node repeats, and returns that cycle in execution order.
func findCycle(def *workflowpb.WorkflowDefinition, indeg map[string]int, ids []string) []string {
	var start string
	for _, id := range ids {
		if indeg[id] > 0 {
			start = id
			break
		}
	}
	seen := map[string]int{}
	var path []string
	for cur := start; ; {
		if i, ok := seen[cur]; ok {
			cyc := slices.Clone(path[i:])
			slices.Reverse(cyc) // path follows dependencies backwards
			return append(cyc, cyc[0])
		}
		seen[cur] = len(path)
		path = append(path, cur)
		deps := slices.Clone(def.GetNodes()[cur].GetDependencies())
		slices.Sort(deps)
		for _, d := range deps {
			if indeg[d] > 0 {
				cur = d
				break
			}
		}
	}
}

// Mermaid draws the definition as a Mermaid flowchart; states colour nodes when given.
func Mermaid(def *workflowpb.WorkflowDefinition, states map[string]workflowpb.NodeStatus) string {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	ids := sortedIDs(def)
	for i, id := range ids {
		n := def.GetNodes()[id]
		label := id + "<br/>" + n.GetAgentId()
		if st, ok := states[id]; ok {
			label += "<br/>" + st.String()
		}
		fmt.Fprintf(&b, "  n%d[%q]\n", i, label)
	}
	for i, id := range ids {
		for _, dep := range def.GetNodes()[id].GetDependencies() {
			if j, ok := slices.BinarySearch(ids, dep); ok {
				fmt.Fprintf(&b, "  n%d --> n%d\n", j, i)
			}
		}
	}
	return b.String()
}

// DOT draws the definition as a Graphviz digraph; states label nodes when given.
func DOT(def *workflowpb.WorkflowDefinition, states map[string]workflowpb.NodeStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", strconv.Quote(def.GetWorkflowId()))
	ids := sortedIDs(def)
	for _, id := range ids {
		label := id + "\\n" + def.GetNodes()[id].GetAgentId()
		if st, ok := states[id]; ok {
			label += "\\n" + st.String()
		}
		fmt.Fprintf(&b, "  %s [label=\"%s\"];\n", strconv.Quote(id), label)
	}
	for _, id := range ids {
		for _, dep := range def.GetNodes()[id].GetDependencies() {
			fmt.Fprintf(&b, "  %s -> %s;\n", strconv.Quote(dep), strconv.Quote(id))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

func sortedIDs(def *workflowpb.WorkflowDefinition) []string {
	ids := make([]string, 0, len(def.GetNodes()))
	for id := range def.GetNodes() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
