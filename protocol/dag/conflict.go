package dag

import (
	"cmp"
	"slices"

	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The write-conflict rule (Validate): two writes overlap when their targets are the same
// pointer or one is a prefix of the other, token by token ("/a" covers "/a/b", not "/ab").
// Overlapping writes of two nodes must be ordered by the dependencies (one node an ancestor
// of the other), or workflow_data would depend on which finished first; one node may not
// write overlapping targets at all.
//
// The targets go into a trie of tokens. Walking it depth first, the writers on the current
// path all overlap one another, so they must form a chain under "is an ancestor of". The
// path's writers are kept in a Fenwick tree over topological positions; a new writer only
// has to be ordered after its predecessor and before its successor there (the chain is then
// whole, by transitivity), so the check costs two reachability questions per write.

type trie struct {
	children map[string]*trie
	writes   []targetWrite
}

type targetWrite struct {
	node   int32
	target string
}

func (g *graph) writeConflicts(order, pos []int32, ops *opCounter) *protocol.Error {
	root := &trie{}
	hasWrites := false
	for i, n := range g.nodes {
		for _, t := range sortedValues(n.GetOutputMapping()) {
			p, _ := parseRef(t) // checked by checkNode
			at := root
			for _, tok := range p {
				if at.children == nil {
					at.children = map[string]*trie{}
				}
				next := at.children[tok]
				if next == nil {
					next = &trie{}
					at.children[tok] = next
				}
				at = next
			}
			at.writes = append(at.writes, targetWrite{int32(i), t})
			hasWrites = true
			ops.add(len(p) + 1)
		}
	}
	if !hasWrites {
		return nil
	}
	c := &conflicts{g: g, order: order, pos: pos, ops: ops,
		tree:    make([]int32, len(order)+1),
		onPath:  map[int32]string{},
		stamp:   make([]int32, len(order)),
		queryID: 0,
	}
	return c.walk(root)
}

type conflicts struct {
	g          *graph
	order, pos []int32
	ops        *opCounter
	tree       []int32          // Fenwick tree over positions 1..V: writers on the path
	count      int32            // writers on the path
	onPath     map[int32]string // node → its target on the path
	stamp      []int32          // visited marks of the reachability search, per query
	queryID    int32
	queue      []int32
}

func (c *conflicts) walk(t *trie) *protocol.Error {
	ws := slices.Clone(t.writes)
	slices.SortFunc(ws, func(a, b targetWrite) int {
		if d := c.pos[a.node] - c.pos[b.node]; d != 0 {
			return int(d)
		}
		return cmp.Compare(a.target, b.target)
	})
	added := 0
	var err *protocol.Error
	for _, w := range ws {
		if other, dup := c.onPath[w.node]; dup {
			err = refuse("node %q writes overlapping workflow_data targets %q and %q; the order of the two writes would be undefined (§17.7 output_mapping)", c.g.ids[w.node], other, w.target)
			break
		}
		p := c.pos[w.node] + 1 // Fenwick positions are 1-based
		if pred := c.kth(c.prefix(p - 1)); pred > 0 {
			if u := c.order[pred-1]; !c.reaches(u, w.node) {
				err = c.conflict(u, w)
				break
			}
		}
		if before := c.prefix(p); before < c.count {
			if v := c.order[c.kth(before+1)-1]; !c.reaches(w.node, v) {
				err = c.conflict(v, w)
				break
			}
		}
		c.add(p, 1)
		c.onPath[w.node] = w.target
		added++
	}
	if err == nil {
		for _, k := range sortedTrieKeys(t.children) {
			if err = c.walk(t.children[k]); err != nil {
				break
			}
		}
	}
	for _, w := range ws[:added] {
		c.add(c.pos[w.node]+1, -1)
		delete(c.onPath, w.node)
	}
	return err
}

func (c *conflicts) conflict(other int32, w targetWrite) *protocol.Error {
	a, b := c.g.ids[other], c.g.ids[w.node]
	ta, tb := c.onPath[other], w.target
	if b < a {
		a, b, ta, tb = b, a, tb, ta
	}
	return refuse("nodes %q and %q both write workflow_data (%q and %q overlap) but neither depends on the other, so the result would depend on which finishes first; add a dependency between them or write different keys (§17.7 output_mapping)", a, b, ta, tb)
}

// reaches reports whether node u is an ancestor of node w, pos[u] < pos[w]: a search from w
// up its dependencies that never leaves the positions between the two (every path from u
// to w stays there).
func (c *conflicts) reaches(u, w int32) bool {
	c.queryID++
	c.queue = append(c.queue[:0], w)
	c.stamp[w] = c.queryID
	for len(c.queue) > 0 {
		v := c.queue[len(c.queue)-1]
		c.queue = c.queue[:len(c.queue)-1]
		c.ops.add(1)
		for _, d := range c.g.deps[v] {
			c.ops.add(1)
			if d == u {
				return true
			}
			if c.pos[d] > c.pos[u] && c.stamp[d] != c.queryID {
				c.stamp[d] = c.queryID
				c.queue = append(c.queue, d)
			}
		}
	}
	return false
}

func (c *conflicts) add(i, delta int32) {
	c.count += delta
	for ; int(i) < len(c.tree); i += i & -i {
		c.tree[i] += delta
	}
}

func (c *conflicts) prefix(i int32) int32 {
	s := int32(0)
	for ; i > 0; i -= i & -i {
		s += c.tree[i]
	}
	return s
}

// kth returns the position of the k-th writer on the path (1-based), 0 when k is 0.
func (c *conflicts) kth(k int32) int32 {
	if k <= 0 {
		return 0
	}
	p := int32(0)
	step := int32(1)
	for int(step*2) < len(c.tree) {
		step *= 2
	}
	for ; step > 0; step /= 2 {
		if int(p+step) < len(c.tree) && c.tree[p+step] < k {
			p += step
			k -= c.tree[p]
		}
	}
	return p + 1
}

func sortedValues(m map[string]string) []string {
	vs := make([]string, 0, len(m))
	// Collected, then sorted: the order of the map does not leak out (workflow code calls
	// this package; docs/architecture.md, determinism).
	//workflowcheck:ignore
	for _, v := range m {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

func sortedTrieKeys(m map[string]*trie) []string {
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
