package dag

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// Data flow (§17.7 "Input/Output Mapping"; 000 §3.11.3). workflow_data is one JSON object.
// input_mapping maps a node input name to a reference into workflow_data; output_mapping
// maps a reference into the node's output (a key, a pointer, or "" for the whole output) to
// a reference into workflow_data. References are JSON Pointers or plain top-level keys
// (pointer.go).
//
// Merge order: when several nodes finish together, their outputs are applied in the
// definition's topological order (Result.Order), never in completion order, so a replay or
// a resume rebuilds the same workflow_data. Validate refuses definitions whose unordered
// nodes write overlapping places, so within one batch the order only matters for nodes the
// dependencies already order.

// workflowData decodes workflow_data: empty means {}, anything but an object is refused.
func workflowData(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	v, err := decodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("workflow_data is not JSON: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("workflow_data must be a JSON object, not %s", aKind(v))
	}
	return m, nil
}

// Input returns the node's input, a JSON object: for each input_mapping entry, the input
// name bound to the value its reference finds in workflow_data. A reference that finds
// nothing leaves its name out (so a node after a SKIPPED producer sees the input absent,
// not null). A node without input_mapping receives the whole workflow_data.
func Input(node *workflowpb.WorkflowNode, data []byte) ([]byte, error) {
	doc, err := workflowData(data)
	if err != nil {
		return nil, err
	}
	if len(node.GetInputMapping()) == 0 {
		return encodeJSON(doc)
	}
	in := make(map[string]any, len(node.GetInputMapping()))
	// In key order, so that the first bad reference is always the one reported.
	for _, name := range sortedKeys(node.GetInputMapping()) {
		ref := node.GetInputMapping()[name]
		p, err := parseRef(ref)
		if err != nil {
			return nil, fmt.Errorf("node %q: input_mapping %q: %w", node.GetNodeId(), name, err)
		}
		if v, found := get(doc, p); found {
			in[name] = v
		}
	}
	return encodeJSON(in)
}

// ApplyOutput writes the node's output into workflow_data by its output_mapping and returns
// the new workflow_data. Entries are applied in the order of their targets. The output is
// JSON; output that is not JSON is taken as one string, which only the whole-output source
// "" can map. A source the output does not have is an error (the node did not produce what
// its definition promised). A node without output_mapping leaves workflow_data unchanged.
func ApplyOutput(node *workflowpb.WorkflowNode, data, output []byte) ([]byte, error) {
	doc, err := workflowData(data)
	if err != nil {
		return nil, err
	}
	if len(node.GetOutputMapping()) == 0 {
		return encodeJSON(doc)
	}
	out, err := decodeJSON(output)
	if err != nil {
		out = string(output) // text output: reachable as a whole through ""
	}
	type write struct {
		src, dst pointer
		from, to string
	}
	writes := make([]write, 0, len(node.GetOutputMapping()))
	for _, from := range sortedKeys(node.GetOutputMapping()) {
		to := node.GetOutputMapping()[from]
		src, err := parseRef(from)
		if err != nil {
			return nil, fmt.Errorf("node %q: output_mapping source %q: %w", node.GetNodeId(), from, err)
		}
		dst, err := parseRef(to)
		if err != nil {
			return nil, fmt.Errorf("node %q: output_mapping target %q: %w", node.GetNodeId(), to, err)
		}
		if len(dst) == 0 {
			return nil, fmt.Errorf("node %q: output_mapping %q has an empty target", node.GetNodeId(), from)
		}
		writes = append(writes, write{src, dst, from, to})
	}
	slices.SortFunc(writes, func(a, b write) int { return slices.Compare(a.dst, b.dst) })
	var root any = doc
	for _, w := range writes {
		v, found := get(out, w.src)
		if !found {
			return nil, fmt.Errorf("node %q: output has no %q (output_mapping %q → %q)", node.GetNodeId(), w.from, w.from, w.to)
		}
		if root, err = set(root, w.dst, v); err != nil {
			return nil, fmt.Errorf("node %q: output_mapping %q → %q: %w", node.GetNodeId(), w.from, w.to, err)
		}
	}
	return encodeJSON(root)
}
