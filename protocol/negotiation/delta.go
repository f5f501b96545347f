package negotiation

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/schemas"
)

// MaxChangedPaths bounds DeltaSummary.changed_paths (§17.3: "a bounded magnitude and set of
// changed_paths"); the magnitude still counts every changed leaf.
const MaxChangedPaths = 64

// Delta is the structural JSON DeltaSummary of prev → next (§17.3).
//
// Both documents are flattened into leaves: a leaf is a scalar (string, number, boolean,
// null) or an empty object or array, at its RFC 6901 JSON Pointer ("~" escaped as "~0", "/"
// as "~1"); objects are compared by key and arrays by index. A leaf in the union of both
// documents has changed when it is only in one of them (added, removed, or replaced by a
// value of another shape, an object member turned array element included) or holds a different value (strings and booleans by value, numbers
// numerically: 1 and 1.0 are equal). changed_paths are the changed leaves' pointers, sorted,
// at most MaxChangedPaths; magnitude = changed leaves / leaves in the union, in [0,1].
//
// prev == nil (the first version): magnitude 0 and no paths. When contentType is not JSON
// (see IsJSON) or either side does not parse: magnitude 0 when the bytes are equal, else 1
// with changed_paths [""] (the whole document).
func Delta(prev, next []byte, contentType string) *policypb.DeltaSummary {
	if prev == nil {
		return &policypb.DeltaSummary{}
	}
	if IsJSON(contentType) {
		a, errA := decodeJSON(prev)
		b, errB := decodeJSON(next)
		if errA == nil && errB == nil {
			return structuralDelta(a, b)
		}
	}
	if bytes.Equal(prev, next) {
		return &policypb.DeltaSummary{}
	}
	return &policypb.DeltaSummary{Magnitude: 1, ChangedPaths: []string{""}}
}

// leaf is one flattened leaf: its pointer, the kinds of the containers on the way ('o'
// object, 'a' array, one per token, so that {"0": 1} and [1] differ) and its value.
type leaf struct {
	path  string
	shape string
	v     any
}

func structuralDelta(a, b any) *policypb.DeltaSummary {
	la := flatten(a, "", "", nil)
	lb := flatten(b, "", "", nil)
	sortLeaves(la)
	sortLeaves(lb)
	// Merge the two sorted leaf lists.
	var changed []string
	union := 0
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		union++
		switch {
		case j == len(lb) || (i < len(la) && la[i].path < lb[j].path):
			changed = append(changed, la[i].path)
			i++
		case i == len(la) || lb[j].path < la[i].path:
			changed = append(changed, lb[j].path)
			j++
		default:
			if la[i].shape != lb[j].shape || !sameLeaf(la[i].v, lb[j].v) {
				changed = append(changed, la[i].path)
			}
			i++
			j++
		}
	}
	d := &policypb.DeltaSummary{}
	if union == 0 || len(changed) == 0 {
		return d
	}
	d.Magnitude = float32(min(1, float64(len(changed))/float64(union)))
	if len(changed) > MaxChangedPaths {
		changed = changed[:MaxChangedPaths]
	}
	d.ChangedPaths = changed
	return d
}

func sortLeaves(ls []leaf) {
	slices.SortFunc(ls, func(x, y leaf) int {
		switch {
		case x.path < y.path:
			return -1
		case x.path > y.path:
			return 1
		}
		return 0
	})
}

// flatten appends the leaves of v under path to out.
func flatten(v any, path, shape string, out []leaf) []leaf {
	switch c := v.(type) {
	case map[string]any:
		if len(c) == 0 {
			return append(out, leaf{path, shape, c})
		}
		// Members are visited in map order; the caller sorts the leaves by path, so that
		// order does not leak out.
		//workflowcheck:ignore
		for k, child := range c {
			out = flatten(child, path+schemas.Pointer([]string{k}), shape+"o", out)
		}
		return out
	case []any:
		if len(c) == 0 {
			return append(out, leaf{path, shape, c})
		}
		for i, child := range c {
			out = flatten(child, path+"/"+strconv.Itoa(i), shape+"a", out)
		}
		return out
	default:
		return append(out, leaf{path, shape, v})
	}
}

// sameLeaf compares two leaves: scalars by value (numbers numerically), empty containers by
// kind.
func sameLeaf(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		_, ok := b.(map[string]any)
		return ok
	case []any:
		_, ok := b.([]any)
		return ok
	case json.Number:
		y, ok := b.(json.Number)
		return ok && sameNumber(x, y)
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

// sameNumber compares JSON numbers numerically where float64 holds them (1 == 1.0 == 1e0),
// and by their text otherwise (beyond float64's range).
func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	fa, errA := strconv.ParseFloat(string(a), 64)
	fb, errB := strconv.ParseFloat(string(b), 64)
	if errA != nil || errB != nil || math.IsInf(fa, 0) || math.IsInf(fb, 0) {
		return false
	}
	return fa == fb
}

// Tokens estimates a draft's token cost as ceil(len(draft)/4): about four bytes per token,
// the usual rule of thumb for English text and JSON under BPE tokenisers. It needs no model
// and gives every replay the same count.
func Tokens(draft []byte) uint64 {
	return (uint64(len(draft)) + 3) / 4
}
