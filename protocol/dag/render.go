package dag

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// Pictures of a definition or a run: Mermaid (renders on GitHub and in the docs) and
// Graphviz DOT. Nodes appear in node_id order, edges (dependency → dependent) in the order of
// their dependents then dependencies, so the same definition and states always give the
// same text. A node's label is its node_id, its agent, its trigger when that is not
// DEPENDENCY, and its status when states has one; the status also picks the node's style.
// Dependencies on nodes the definition does not have are left out (the picture of an
// invalid definition still renders).

// statusStyle is the look of each status: Mermaid classDef / DOT fill and border colours.
var statusStyle = []struct {
	status       workflowpb.NodeStatus
	class        string
	fill, stroke string
}{
	{workflowpb.NodeStatus_PENDING, "pending", "#f4f4f5", "#a1a1aa"},
	{workflowpb.NodeStatus_READY, "ready", "#e0f2fe", "#0284c7"},
	{workflowpb.NodeStatus_RUNNING, "running", "#fef9c3", "#ca8a04"},
	{workflowpb.NodeStatus_COMPLETED, "completed", "#dcfce7", "#16a34a"},
	{workflowpb.NodeStatus_FAILED, "failed", "#fee2e2", "#dc2626"},
	{workflowpb.NodeStatus_SKIPPED, "skipped", "#f5f5f4", "#78716c"},
}

// NodeStyle is how the pictures draw a node of one status: its class name and its fill and
// border colours. The console's drawing of a run uses it too, so both colour alike.
type NodeStyle struct {
	Class, Fill, Stroke string
}

// StyleOf is the style of status s; false for a status the pictures leave uncoloured (a
// node that has not started).
func StyleOf(s workflowpb.NodeStatus) (NodeStyle, bool) {
	for _, st := range statusStyle {
		if st.status == s {
			return NodeStyle{Class: st.class, Fill: st.fill, Stroke: st.stroke}, true
		}
	}
	return NodeStyle{}, false
}

// picture is the drawable form of a definition.
type picture struct {
	ids    []string
	at     map[string]int
	labels [][]string // lines of each node's label
	status []workflowpb.NodeStatus
	edges  [][2]int // from dependency to dependent
}

func draw(def *workflowpb.WorkflowDefinition, states map[string]workflowpb.NodeStatus) picture {
	var p picture
	for k, n := range def.GetNodes() {
		if n != nil {
			p.ids = append(p.ids, k)
		}
	}
	slices.Sort(p.ids)
	p.at = make(map[string]int, len(p.ids))
	for i, id := range p.ids {
		p.at[id] = i
	}
	for i, id := range p.ids {
		n := def.GetNodes()[id]
		lines := []string{id, "agent: " + n.GetAgentId()}
		if t := n.GetTriggerType(); t != workflowpb.TriggerType_DEPENDENCY && t != workflowpb.TriggerType_TRIGGER_TYPE_UNSPECIFIED {
			lines = append(lines, "trigger: "+t.String())
		}
		st := states[id]
		if _, ok := StyleOf(st); ok {
			lines = append(lines, st.String())
		}
		p.labels = append(p.labels, lines)
		p.status = append(p.status, st)
		deps := slices.Clone(n.GetDependencies())
		slices.Sort(deps)
		deps = slices.Compact(deps)
		for _, d := range deps {
			if j, ok := p.at[d]; ok {
				p.edges = append(p.edges, [2]int{j, i})
			}
		}
	}
	return p
}

// Mermaid renders the definition as a Mermaid flowchart, top to bottom, with each node's
// status from states (nodes absent from states are drawn without one).
func Mermaid(def *workflowpb.WorkflowDefinition, states map[string]workflowpb.NodeStatus) string {
	p := draw(def, states)
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	// Mermaid ids are n0, n1, … in node_id order: a node_id could be a Mermaid keyword
	// ("end") or hold characters Mermaid reads as syntax; the label carries the name.
	for i, lines := range p.labels {
		esc := make([]string, len(lines))
		for j, l := range lines {
			esc[j] = mermaidEscape(l)
		}
		fmt.Fprintf(&b, "    n%d[\"%s\"]", i, strings.Join(esc, "<br/>"))
		if style, ok := StyleOf(p.status[i]); ok {
			b.WriteString(":::" + style.Class)
		}
		b.WriteString("\n")
	}
	for _, e := range p.edges {
		fmt.Fprintf(&b, "    n%d --> n%d\n", e[0], e[1])
	}
	for _, st := range statusStyle {
		if slices.Contains(p.status, st.status) {
			fmt.Fprintf(&b, "    classDef %s fill:%s,stroke:%s,color:#111\n", st.class, st.fill, st.stroke)
		}
	}
	return b.String()
}

// mermaidEscape writes every character that is not a plain letter, digit, space or one of
// . _ : @ - / as a Mermaid entity code (#<decimal>;), so that quotes, brackets, "<", "#"
// and the rest of Mermaid's syntax in a label stay text.
func mermaidEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9',
			r == ' ', r == '.', r == '_', r == ':', r == '@', r == '-', r == '/':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "#%d;", r)
		}
	}
	return b.String()
}

// DOT renders the definition as a Graphviz digraph, top to bottom, each node filled by its
// status from states (white without one).
func DOT(def *workflowpb.WorkflowDefinition, states map[string]workflowpb.NodeStatus) string {
	p := draw(def, states)
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(def.GetWorkflowId()))
	b.WriteString("    rankdir=TB;\n")
	b.WriteString("    node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", color=\"#52525b\", fontname=\"Helvetica\"];\n")
	for i, id := range p.ids {
		fmt.Fprintf(&b, "    %s [label=%s", dotQuote(id), dotQuote(strings.Join(p.labels[i], "\n")))
		if style, ok := StyleOf(p.status[i]); ok {
			fmt.Fprintf(&b, ", fillcolor=%q, color=%q", style.Fill, style.Stroke)
		}
		b.WriteString("];\n")
	}
	for _, e := range p.edges {
		fmt.Fprintf(&b, "    %s -> %s;\n", dotQuote(p.ids[e[0]]), dotQuote(p.ids[e[1]]))
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote makes a DOT quoted string: backslash and double quote escaped, line breaks as
// \n (which labels render as centred line breaks), other control characters dropped.
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r == 0x7f:
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
