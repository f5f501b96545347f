// Package dag holds the rules of DAG workflows (§17.7; 000 §3.11.3): validation of a
// WorkflowDefinition with its topological order, the mapping of workflow_data onto node
// inputs and of node outputs back onto workflow_data (RFC 6901 JSON Pointers), the triggers
// and skip conditions a node's metadata carries, and the pictures of a run (Mermaid, DOT).
// Like package protocol it does no I/O, reads no clock and draws no randomness, so workflow
// code may call it; every answer is deterministic, whatever Go's map order.
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

// Metadata keys this package reads. Node metadata: MetaSchedule, MetaSkipIf, MetaAfterSkipped,
// MetaEvent (event.go). Definition metadata: MetaLateBinding.
const (
	// MetaSchedule is the node metadata key holding the cron expression of a SCHEDULE node
	// (standard five fields or a descriptor such as "@hourly"; see ParseSchedule).
	MetaSchedule = "schedule"
	// MetaSkipIf is the node metadata key holding a reference into workflow_data; when the
	// value there is JSON true the node is SKIPPED instead of run (see Skip).
	MetaSkipIf = "skip_if"
	// MetaAfterSkipped is the node metadata key saying what a SKIPPED dependency means for
	// the node: AfterSkippedSkip (the default) or AfterSkippedRun (see AfterSkipped).
	MetaAfterSkipped = "after_skipped"
	// MetaLateBinding is the definition metadata key that, set to "true", lets a definition
	// name agents that are not registered yet; by default CreateWorkflow refuses them.
	MetaLateBinding = "late_binding"
)

// maxID bounds node and workflow ids, like agent ids (they end up in workflow IDs).
const maxID = 128

// Result is what validation learned of a definition.
type Result struct {
	// Order is a topological order of the node ids, deterministic: Kahn's algorithm taking,
	// among the nodes ready at each step, the smallest node_id. Outputs are merged into
	// workflow_data in this order (see ApplyOutput).
	Order []string
	// Roots are the nodes without dependencies, sorted (§17.7 "Root Node Detection").
	Roots []string
	// Warnings are the nodes that no root starting with the run reaches (see Validate),
	// one sentence per node, sorted by node id.
	Warnings []string
}

// CodeCycleDetected is the error_code §17.7 gives the refusal of a cyclic definition.
const CodeCycleDetected = "workflow_cycle_detected"

// CycleError is the refusal of a definition whose dependencies form a cycle (§17.7: error
// code workflow_cycle_detected, naming the nodes involved).
type CycleError struct {
	// Nodes are the nodes of one cycle in execution order (each node depends on the one
	// before it), starting at the smallest node_id, with the first repeated at the end.
	Nodes []string
}

// maxCycleShown bounds the nodes the message of a CycleError lists; Nodes holds them all.
const maxCycleShown = 32

// Error renders "workflow_cycle_detected: nodes a → b → c → a form a cycle". A cycle longer
// than 32 nodes is shortened in the middle; Nodes always holds the whole cycle.
func (e *CycleError) Error() string {
	names := make([]string, 0, min(len(e.Nodes), maxCycleShown+1))
	if len(e.Nodes) <= maxCycleShown {
		for _, n := range e.Nodes {
			names = append(names, displayID(n))
		}
	} else {
		head := maxCycleShown / 2
		for _, n := range e.Nodes[:head] {
			names = append(names, displayID(n))
		}
		names = append(names, fmt.Sprintf("… (%d more) …", len(e.Nodes)-maxCycleShown))
		for _, n := range e.Nodes[len(e.Nodes)-(maxCycleShown-head):] {
			names = append(names, displayID(n))
		}
	}
	return "workflow_cycle_detected: nodes " + strings.Join(names, " → ") + " form a cycle"
}

// displayID prints an id bare when it is a plain id, quoted otherwise (ids that fail
// validation may still appear in a cycle message of a fuzzed or hand-built definition).
func displayID(id string) string {
	if validID(id) {
		return id
	}
	return strconv.Quote(id)
}

// validID reports whether id has the shape of agent ids: 1-128 characters of letters,
// digits and . _ : @ - starting with a letter or digit. Node and workflow ids become part of
// Temporal workflow and activity IDs, so they keep that charset. (Hand-written rather than a
// regexp: it runs once per node of 200,000-node definitions.)
func validID(id string) bool {
	if id == "" || len(id) > maxID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '@' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func refuse(format string, args ...any) *protocol.Error {
	return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, format, args...)
}

// short keeps user strings in messages readable.
func short(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// opCounter counts the steps of validation so that a test can bound them by V+E without a
// clock; nil counts nothing.
type opCounter struct{ n int }

func (c *opCounter) add(k int) {
	if c != nil {
		c.n += k
	}
}

// graph is a validated definition in index form: node i is ids[i], ids sorted, so index
// order is node_id order.
type graph struct {
	ids   []string
	nodes []*workflowpb.WorkflowNode
	deps  [][]int32 // deps[i]: the indices node i depends on
	// Dependents in compressed form: the dependents of i are out[outStart[i]:outStart[i+1]].
	outStart []int32
	out      []int32
}

// Validate checks a definition (§17.7, 000 §3.11.3) and returns its topological order, or
// the first refusal found, nodes examined in node_id order:
//
//   - a *CycleError (workflow_cycle_detected) naming the nodes of one cycle in order;
//   - a *protocol.Error with VALIDATION_ERROR for: a nil definition; an empty or malformed
//     workflow_id; no nodes (so no root node); a node that is nil, whose node_id is empty,
//     malformed, or differs from its map key (a duplicate node_id when it equals another
//     key); a missing or malformed agent_id; an unknown trigger_type; a dependency that is
//     empty, the node itself, unknown, or listed twice; a SCHEDULE node without a schedule
//     that parses, or a schedule on a node of another trigger; a malformed skip_if,
//     input_mapping or output_mapping reference; a late_binding other than "true"/"false";
//     and two nodes, neither an ancestor of the other, whose output_mapping targets overlap
//     (the same pointer, or one a prefix of the other), or one node writing overlapping
//     targets — their merge order would otherwise depend on completion order.
//
// A definition without a root node but with nodes necessarily contains a cycle, and is
// reported as that cycle (the error code §17.7 requires).
//
// Warnings: every node of a DAG has a path from some root, so §17.7's "unreachable" is read
// as "not reached from a root that starts with the run": roots whose trigger is MANUAL or
// EVENT wait for an outside action, and a node all of whose root ancestors are such roots
// (the roots themselves included) does not run unless someone acts. The definition is
// accepted; each such node gets one warning.
//
// Cost: O(V+E) graph work (Kahn's algorithm, the cycle search, the reachability of the
// warnings), plus sorting the V ids and a heap of ready nodes (O(V log V)) to make the order
// deterministic. The write-conflict check asks, per overlapping output target, whether one
// writer reaches the other; a writer that depends directly on the previous one answers at
// once, otherwise a search bounded to the nodes between them in the order runs.
func Validate(def *workflowpb.WorkflowDefinition) (Result, error) {
	return validate(def, nil)
}

func validate(def *workflowpb.WorkflowDefinition, ops *opCounter) (Result, error) {
	if def == nil {
		return Result{}, refuse("workflow definition is required (§17.7)")
	}
	switch id := def.GetWorkflowId(); {
	case id == "":
		return Result{}, refuse("workflow_id is required (§17.7)")
	case !validID(id):
		return Result{}, refuse("workflow_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", short(id))
	}
	if lb, ok := def.GetMetadata()[MetaLateBinding]; ok && lb != "true" && lb != "false" {
		return Result{}, refuse("metadata %s=%q must be \"true\" or \"false\"", MetaLateBinding, short(lb))
	}
	if len(def.GetNodes()) == 0 {
		return Result{}, refuse("workflow %q has no nodes, so no root node (§17.7: a valid workflow MUST have at least one root node)", def.GetWorkflowId())
	}
	g, perr := index(def, ops)
	if perr != nil {
		return Result{}, perr
	}
	order, pos, cerr := g.kahn(ops)
	if cerr != nil {
		return Result{}, cerr
	}
	if perr := g.writeConflicts(order, pos, ops); perr != nil {
		return Result{}, perr
	}
	res := Result{Order: make([]string, len(order))}
	for i, n := range order {
		res.Order[i] = g.ids[n]
	}
	for i, d := range g.deps {
		if len(d) == 0 {
			res.Roots = append(res.Roots, g.ids[i])
		}
	}
	res.Warnings = g.unreachable(ops)
	return res, nil
}

// index checks each node on its own and builds the index form.
func index(def *workflowpb.WorkflowDefinition, ops *opCounter) (*graph, *protocol.Error) {
	nodes := def.GetNodes()
	g := &graph{ids: make([]string, 0, len(nodes))}
	// Collected, then sorted: the order of the map does not leak out (workflow code calls
	// this package; docs/architecture.md, determinism).
	//workflowcheck:ignore
	for k := range nodes {
		g.ids = append(g.ids, k)
	}
	slices.Sort(g.ids)
	at := make(map[string]int32, len(g.ids))
	for i, k := range g.ids {
		at[k] = int32(i)
	}
	g.nodes = make([]*workflowpb.WorkflowNode, len(g.ids))
	g.deps = make([][]int32, len(g.ids))
	edges := 0
	for i, key := range g.ids {
		n := nodes[key]
		ops.add(1)
		if err := checkNode(key, n, at); err != nil {
			return nil, err
		}
		g.nodes[i] = n
		ds := make([]int32, len(n.GetDependencies()))
		for j, d := range n.GetDependencies() {
			ds[j] = at[d]
		}
		// A dependency listed twice: sort a copy (dependency lists are short) and look for
		// neighbours; reported by name.
		sorted := slices.Clone(ds)
		slices.Sort(sorted)
		for j := 1; j < len(sorted); j++ {
			if sorted[j] == sorted[j-1] {
				return nil, refuse("node %q lists dependency %q twice (§17.7: dependencies are a set)", key, g.ids[sorted[j]])
			}
		}
		ops.add(len(ds))
		g.deps[i] = ds
		edges += len(ds)
	}
	// Dependents, compressed: count, prefix-sum, fill. Filling in index order keeps each
	// node's dependents sorted by index.
	g.outStart = make([]int32, len(g.ids)+1)
	for _, ds := range g.deps {
		for _, d := range ds {
			g.outStart[d+1]++
		}
	}
	for i := 1; i < len(g.outStart); i++ {
		g.outStart[i] += g.outStart[i-1]
	}
	g.out = make([]int32, edges)
	fill := slices.Clone(g.outStart[:len(g.ids)])
	for i, ds := range g.deps {
		for _, d := range ds {
			g.out[fill[d]] = int32(i)
			fill[d]++
		}
	}
	ops.add(len(g.ids) + edges)
	return g, nil
}

// checkNode applies the per-node rules of Validate.
func checkNode(key string, n *workflowpb.WorkflowNode, at map[string]int32) *protocol.Error {
	if n == nil {
		return refuse("node %q is empty (nil)", short(key))
	}
	id := n.GetNodeId()
	switch {
	case key == "" && id == "":
		return refuse("a node has an empty node_id (§17.7: node_id is required)")
	case id == "":
		return refuse("node under key %q has an empty node_id (§17.7: node_id is required)", short(key))
	case key == "":
		return refuse("node %q is stored under an empty key; the nodes map is keyed by node_id (§17.7)", short(id))
	case id != key:
		if _, dup := at[id]; dup {
			return refuse("duplicate node_id %q: the nodes under keys %q and %q both claim it (§17.7: node_id is unique within the workflow)", short(id), short(id), short(key))
		}
		return refuse("node under key %q has node_id %q; the nodes map is keyed by node_id (§17.7)", short(key), short(id))
	case !validID(id):
		return refuse("node_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", short(id))
	}
	if n.GetAgentId() == "" {
		return refuse("node %q has no agent_id (§17.7: the agent responsible for executing the node)", id)
	}
	if err := protocol.ValidateAgentID(n.GetAgentId()); err != nil {
		return refuse("node %q: %s", id, err.Msg)
	}
	trig := n.GetTriggerType()
	if _, known := workflowpb.TriggerType_name[int32(trig)]; !known {
		return refuse("node %q has unknown trigger_type %d (§17.7: EVENT, SCHEDULE, MANUAL or DEPENDENCY)", id, int32(trig))
	}
	for _, d := range n.GetDependencies() {
		switch _, known := at[d]; {
		case d == "":
			return refuse("node %q lists an empty dependency", id)
		case d == id:
			return refuse("node %q depends on itself (§17.7: self-referential dependencies MUST be rejected)", id)
		case !known:
			return refuse("node %q depends on unknown node %q (§17.7: every dependency MUST exist in the nodes map)", id, short(d))
		}
	}
	sched, hasSched := n.GetMetadata()[MetaSchedule]
	switch {
	case trig == workflowpb.TriggerType_SCHEDULE && !hasSched:
		return refuse("node %q has trigger_type SCHEDULE but no metadata %q (a cron expression)", id, MetaSchedule)
	case trig == workflowpb.TriggerType_SCHEDULE:
		if _, err := parseCron(sched); err != nil {
			return refuse("node %q: metadata %s=%q is not a cron expression: %v", id, MetaSchedule, short(sched), err)
		}
	case hasSched:
		return refuse("node %q has metadata %q but trigger_type %s; only SCHEDULE nodes are started by a schedule", id, MetaSchedule, triggerName(trig))
	}
	if a, ok := n.GetMetadata()[MetaAfterSkipped]; ok && a != AfterSkippedSkip && a != AfterSkippedRun {
		return refuse("node %q: metadata %s=%q must be %q (the default: a SKIPPED dependency skips the node, §17.7) or %q (a SKIPPED dependency counts as satisfied)",
			id, MetaAfterSkipped, short(a), AfterSkippedSkip, AfterSkippedRun)
	}
	if s, ok := n.GetMetadata()[MetaSkipIf]; ok {
		if s == "" {
			return refuse("node %q: metadata %s is empty; it must name a value in workflow_data", id, MetaSkipIf)
		}
		if _, err := parseRef(s); err != nil {
			return refuse("node %q: metadata %s: %v", id, MetaSkipIf, err)
		}
	}
	for _, k := range sortedKeys(n.GetInputMapping()) {
		if k == "" {
			return refuse("node %q: input_mapping has an empty input name", id)
		}
		if _, err := parseRef(n.GetInputMapping()[k]); err != nil {
			return refuse("node %q: input_mapping %q: %v", id, short(k), err)
		}
	}
	for _, k := range sortedKeys(n.GetOutputMapping()) {
		if _, err := parseRef(k); err != nil {
			return refuse("node %q: output_mapping source %q: %v", id, short(k), err)
		}
		t := n.GetOutputMapping()[k]
		if t == "" {
			return refuse("node %q: output_mapping %q has an empty target; it must name a place in workflow_data, not replace all of it", id, short(k))
		}
		if _, err := parseRef(t); err != nil {
			return refuse("node %q: output_mapping target %q: %v", id, short(t), err)
		}
	}
	return nil
}

func triggerName(t workflowpb.TriggerType) string {
	if t == workflowpb.TriggerType_TRIGGER_TYPE_UNSPECIFIED {
		return "DEPENDENCY (unspecified)"
	}
	return t.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	// Collected, then sorted: the order of the map does not leak out (workflow code calls
	// this package; docs/architecture.md, determinism).
	//workflowcheck:ignore
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// kahn runs Kahn's algorithm with a min-heap of ready indices (ties by node_id). It returns
// the order and each node's position in it, or the CycleError of one cycle among the nodes
// it could not order.
func (g *graph) kahn(ops *opCounter) (order, pos []int32, err error) {
	n := len(g.ids)
	indeg := make([]int32, n)
	var ready minHeap
	for i, ds := range g.deps {
		indeg[i] = int32(len(ds))
		if len(ds) == 0 {
			ready = append(ready, int32(i)) // ascending, so already a heap
		}
	}
	order = make([]int32, 0, n)
	pos = make([]int32, n)
	for len(ready) > 0 {
		v := ready.pop()
		pos[v] = int32(len(order))
		order = append(order, v)
		ops.add(1)
		for _, w := range g.out[g.outStart[v]:g.outStart[v+1]] {
			ops.add(1)
			if indeg[w]--; indeg[w] == 0 {
				ready.push(w)
			}
		}
	}
	if len(order) == n {
		return order, pos, nil
	}
	return nil, nil, g.cycle(indeg, ops)
}

// cycle finds one cycle among the nodes Kahn's algorithm left (indeg > 0). Each of them has
// a dependency that was left too, so walking from the smallest left node to its smallest
// left dependency, again and again, must come back to a node already walked: the walk from
// that node's first visit is a cycle. Each node is walked at most once: O(V+E).
func (g *graph) cycle(indeg []int32, ops *opCounter) *CycleError {
	start := int32(-1)
	for i, d := range indeg {
		if d > 0 {
			start = int32(i)
			break
		}
	}
	step := make(map[int32]int) // where on the walk a node was seen
	var walk []int32
	cur := start
	for {
		if k, seen := step[cur]; seen {
			walk = walk[k:]
			break
		}
		step[cur] = len(walk)
		walk = append(walk, cur)
		next := int32(-1)
		for _, d := range g.deps[cur] {
			ops.add(1)
			if indeg[d] > 0 && (next < 0 || d < next) {
				next = d
			}
		}
		cur = next
	}
	// walk follows dependencies (each node depends on the next); the message reads in
	// execution order, so reverse it, then rotate it to start at its smallest node.
	slices.Reverse(walk)
	m := 0
	for i := range walk {
		if walk[i] < walk[m] {
			m = i
		}
	}
	nodes := make([]string, 0, len(walk)+1)
	for i := range walk {
		nodes = append(nodes, g.ids[walk[(m+i)%len(walk)]])
	}
	nodes = append(nodes, nodes[0])
	return &CycleError{Nodes: nodes}
}

// unreachable returns the warnings of Validate: nodes not reached from a root whose
// trigger starts it with the run (DEPENDENCY, unspecified or SCHEDULE).
func (g *graph) unreachable(ops *opCounter) []string {
	seen := make([]bool, len(g.ids))
	var queue []int32
	for i, ds := range g.deps {
		t := g.nodes[i].GetTriggerType()
		if len(ds) == 0 && t != workflowpb.TriggerType_MANUAL && t != workflowpb.TriggerType_EVENT {
			seen[i] = true
			queue = append(queue, int32(i))
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		ops.add(1)
		for _, w := range g.out[g.outStart[v]:g.outStart[v+1]] {
			ops.add(1)
			if !seen[w] {
				seen[w] = true
				queue = append(queue, w)
			}
		}
	}
	var warnings []string
	for i, ok := range seen {
		if ok {
			continue
		}
		if len(g.deps[i]) == 0 {
			warnings = append(warnings, fmt.Sprintf("node %q is unreachable from the run's start: it is a root with trigger_type %s and runs only when triggered", g.ids[i], g.nodes[i].GetTriggerType()))
		} else {
			warnings = append(warnings, fmt.Sprintf("node %q is unreachable from the run's start: every root it depends on waits for a MANUAL or EVENT trigger", g.ids[i]))
		}
	}
	return warnings // index order is node_id order
}

// minHeap is a binary min-heap of node indices.
type minHeap []int32

func (h *minHeap) push(v int32) {
	*h = append(*h, v)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *minHeap) pop() int32 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if r < len(s) && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
