// THROWAWAY STUB — not the real protocol/dag.
//
// This file is a minimal stand-in for the protocol/dag API (Validate/Result, CycleError,
// Input, ApplyOutput, Skip, ParseSchedule) so the DAG run workflow can be built and tested
// before the real package lands. The merge drops this file in favour of the real package;
// nothing here is meant to be kept, reviewed as final, or extended.

// Package dag holds the pure rules of DAG workflows (§17.7). This copy is a stub; its
// //workflowcheck:ignore lines mark JSON coding in memory and map iterations whose results are
// sorted or order-independent.
package dag

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/robfig/cron/v3"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// Result is what validation learned of a definition.
type Result struct {
	// Order is a topological order (Kahn's algorithm, ties by node_id).
	Order []string
	// Roots are the nodes without dependencies, sorted.
	Roots []string
	// Warnings are non-fatal findings, sorted.
	Warnings []string
}

// CycleError names the nodes of one cycle.
type CycleError struct {
	// Nodes are the cycle's nodes in order, the first repeated at the end.
	Nodes []string
}

// Error implements error.
func (e *CycleError) Error() string {
	return "workflow_cycle_detected: nodes " + strings.Join(e.Nodes, " → ") + " form a cycle"
}

// Validate checks a definition and returns its topological order (stub: unknown
// dependencies and cycles only).
func Validate(def *workflowpb.WorkflowDefinition) (Result, error) {
	nodes := def.GetNodes()
	ids := slices.Sorted(func(yield func(string) bool) {
		//workflowcheck:ignore
		for id := range nodes {
			if !yield(id) {
				return
			}
		}
	})
	indeg := map[string]int{}
	dependents := map[string][]string{}
	var res Result
	for _, id := range ids {
		deps := nodes[id].GetDependencies()
		for _, d := range deps {
			if _, ok := nodes[d]; !ok {
				return Result{}, fmt.Errorf("validation_error: node %s depends on unknown node %s", id, d)
			}
			dependents[d] = append(dependents[d], id)
		}
		indeg[id] = len(deps)
		if len(deps) == 0 {
			res.Roots = append(res.Roots, id)
		}
	}
	ready := slices.Clone(res.Roots)
	for len(ready) > 0 {
		slices.Sort(ready)
		n := ready[0]
		ready = ready[1:]
		res.Order = append(res.Order, n)
		for _, m := range dependents[n] {
			if indeg[m]--; indeg[m] == 0 {
				ready = append(ready, m)
			}
		}
	}
	if len(res.Order) != len(ids) {
		var left []string
		for _, id := range ids {
			if indeg[id] > 0 {
				left = append(left, id)
			}
		}
		return Result{}, &CycleError{Nodes: append(left, left[0])}
	}
	return res, nil
}

// Input is the JSON object of a node's inputs: input_mapping is input key → JSON Pointer
// into data.
func Input(node *workflowpb.WorkflowNode, data []byte) ([]byte, error) {
	var doc any
	//workflowcheck:ignore
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("workflow_data is not JSON: %w", err)
	}
	in := map[string]any{}
	//workflowcheck:ignore
	for k, p := range node.GetInputMapping() {
		v, ok, err := get(doc, p)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", k, err)
		}
		if ok {
			in[k] = v
		}
	}
	//workflowcheck:ignore
	return json.Marshal(in)
}

// ApplyOutput writes a node's output into data: output_mapping is output key (or pointer
// into the output) → JSON Pointer into data.
func ApplyOutput(node *workflowpb.WorkflowNode, data, output []byte) ([]byte, error) {
	if len(node.GetOutputMapping()) == 0 {
		return data, nil
	}
	var doc, out any
	//workflowcheck:ignore
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("workflow_data is not JSON: %w", err)
	}
	//workflowcheck:ignore
	if err := json.Unmarshal(output, &out); err != nil {
		return nil, fmt.Errorf("output is not JSON: %w", err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		//workflowcheck:ignore
		for k := range node.GetOutputMapping() {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		src := k
		if !strings.HasPrefix(src, "/") && src != "" {
			src = "/" + escape(src)
		}
		v, ok, err := get(out, src)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", k, err)
		}
		if !ok {
			continue
		}
		if doc, err = set(doc, node.GetOutputMapping()[k], v); err != nil {
			return nil, fmt.Errorf("output %s: %w", k, err)
		}
	}
	//workflowcheck:ignore
	return json.Marshal(doc)
}

// Skip reports whether a node is SKIPPED: metadata "skip_if" is a JSON Pointer whose value
// in data is true.
func Skip(node *workflowpb.WorkflowNode, data []byte) (bool, error) {
	p, ok := node.GetMetadata()["skip_if"]
	if !ok {
		return false, nil
	}
	var doc any
	//workflowcheck:ignore
	if err := json.Unmarshal(data, &doc); err != nil {
		return false, fmt.Errorf("workflow_data is not JSON: %w", err)
	}
	v, found, err := get(doc, p)
	if err != nil || !found {
		return false, err
	}
	return v == true, nil
}

// ParseSchedule parses a SCHEDULE node's metadata "schedule" (standard cron or descriptor).
func ParseSchedule(node *workflowpb.WorkflowNode) (cron.Schedule, error) {
	s := node.GetMetadata()["schedule"]
	if s == "" {
		return nil, fmt.Errorf("validation_error: node %s has trigger SCHEDULE but no metadata \"schedule\"", node.GetNodeId())
	}
	return cron.ParseStandard(s)
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func tokens(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q is not a JSON Pointer", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

func get(doc any, p string) (any, bool, error) {
	ts, err := tokens(p)
	if err != nil {
		return nil, false, err
	}
	cur := doc
	for _, t := range ts {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false, nil
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false, nil
			}
			cur = c[i]
		default:
			return nil, false, nil
		}
	}
	return cur, true, nil
}

func set(doc any, p string, v any) (any, error) {
	ts, err := tokens(p)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return v, nil
	}
	root, ok := doc.(map[string]any)
	if !ok {
		root = map[string]any{}
	}
	cur := root
	for _, t := range ts[:len(ts)-1] {
		next, ok := cur[t].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[t] = next
		}
		cur = next
	}
	cur[ts[len(ts)-1]] = v
	return root, nil
}
