package negotiation

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDelta(t *testing.T) {
	const js = "application/json"
	cases := []struct {
		name       string
		prev, next string
		nilPrev    bool
		ct         string
		magnitude  float32
		paths      []string
	}{
		{name: "first version", nilPrev: true, next: `{"a": 1}`, ct: js},
		{name: "equal objects, other key order and spacing", prev: `{"a": 1, "b": [1, 2]}`, next: `{ "b":[1,2],"a":1 }`, ct: js},
		{name: "numbers compare numerically", prev: `{"a": 1, "b": 2.50}`, next: `{"a": 1.0, "b": 25e-1}`, ct: js},
		{name: "changed scalar", prev: `{"a": 1, "b": 2}`, next: `{"a": 1, "b": 3}`, ct: js, magnitude: 0.5, paths: []string{"/b"}},
		// union {/a, /b, /c}: /b removed, /c added.
		{name: "added and removed", prev: `{"a": 1, "b": 2}`, next: `{"a": 1, "c": 2}`, ct: js, magnitude: 2.0 / 3, paths: []string{"/b", "/c"}},
		// union {/x/0, /x/1, /x/2}: /x/1 changed, /x/2 added.
		{name: "arrays by index", prev: `{"x": [1, 2]}`, next: `{"x": [1, 3, 4]}`, ct: js, magnitude: 2.0 / 3, paths: []string{"/x/1", "/x/2"}},
		// union {/o/p/q, /o/p/r, /o/s}: only /o/p/r changed.
		{name: "nested", prev: `{"o": {"p": {"q": true, "r": "x"}, "s": null}}`, next: `{"o": {"p": {"q": true, "r": "y"}, "s": null}}`, ct: js,
			magnitude: 1.0 / 3, paths: []string{"/o/p/r"}},
		// union {/a, /a/b, /c}: /a (scalar) and /a/b (in the object that replaced it) changed.
		{name: "type change scalar to object", prev: `{"a": 1, "c": 0}`, next: `{"a": {"b": 1}, "c": 0}`, ct: js, magnitude: 2.0 / 3, paths: []string{"/a", "/a/b"}},
		{name: "type change number to string", prev: `{"a": 1}`, next: `{"a": "1"}`, ct: js, magnitude: 1, paths: []string{"/a"}},
		{name: "type change object member to array element", prev: `{"x": {"0": 1}}`, next: `{"x": [1]}`, ct: js, magnitude: 1, paths: []string{"/x/0"}},
		{name: "empty object to empty array", prev: `{}`, next: `[]`, ct: js, magnitude: 1, paths: []string{""}},
		{name: "empty containers are leaves", prev: `{"a": {}, "b": []}`, next: `{"a": {}, "b": [0]}`, ct: js, magnitude: 2.0 / 3, paths: []string{"/b", "/b/0"}},
		{name: "null to false", prev: `null`, next: `false`, ct: js, magnitude: 1, paths: []string{""}},
		{name: "pointer escaping", prev: `{"a/b": 1, "m~n": 1, "": 1}`, next: `{"a/b": 2, "m~n": 2, "": 1}`, ct: js,
			magnitude: 2.0 / 3, paths: []string{"/a~1b", "/m~0n"}},
		{name: "empty key", prev: `{"": {"": 1}}`, next: `{"": {"": 2}}`, ct: js, magnitude: 1, paths: []string{"//"}},
		{name: "+json content type", prev: `[1]`, next: `[2]`, ct: "application/vnd.x+json", magnitude: 1, paths: []string{"/0"}},
		{name: "non-JSON equal", prev: "hello", next: "hello", ct: "text/plain"},
		{name: "non-JSON different", prev: "hello", next: "hello!", ct: "text/plain", magnitude: 1, paths: []string{""}},
		{name: "JSON bytes under a text type compare as bytes", prev: `{"a":1}`, next: `{"a": 1}`, ct: "text/plain", magnitude: 1, paths: []string{""}},
		{name: "unparseable JSON compares as bytes", prev: `{"a":`, next: `{"a": 1}`, ct: js, magnitude: 1, paths: []string{""}},
		{name: "unparseable JSON, equal bytes", prev: `{"a":`, next: `{"a":`, ct: js},
		{name: "empty previous version is not the first", prev: "", next: "x", ct: "text/plain", magnitude: 1, paths: []string{""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var prev []byte
			if !c.nilPrev {
				prev = []byte(c.prev)
			}
			d := Delta(prev, []byte(c.next), c.ct)
			require.NotNil(t, d)
			assert.InDelta(t, c.magnitude, d.GetMagnitude(), 1e-6)
			assert.Equal(t, c.paths, d.GetChangedPaths())
		})
	}
}

// TestDeltaCapsPaths: at most MaxChangedPaths paths, the first in sorted order; the magnitude
// counts every change.
func TestDeltaCapsPaths(t *testing.T) {
	var prev, next []string
	for i := range 100 {
		prev = append(prev, fmt.Sprintf(`"k%03d": %d`, i, i))
		next = append(next, fmt.Sprintf(`"k%03d": %d`, i, i+1))
	}
	// 100 unchanged members too, so the magnitude is 100/200.
	for i := range 100 {
		m := fmt.Sprintf(`"same%03d": true`, i)
		prev = append(prev, m)
		next = append(next, m)
	}
	d := Delta([]byte("{"+strings.Join(prev, ",")+"}"), []byte("{"+strings.Join(next, ",")+"}"), "application/json")
	assert.InDelta(t, 0.5, d.GetMagnitude(), 1e-6)
	require.Len(t, d.GetChangedPaths(), MaxChangedPaths)
	assert.Equal(t, "/k000", d.GetChangedPaths()[0])
	assert.Equal(t, "/k063", d.GetChangedPaths()[MaxChangedPaths-1])
}

// TestDeltaDeterministic: objects are maps in Go; their order must not show in the paths.
func TestDeltaDeterministic(t *testing.T) {
	var prev, next []string
	for i := range 40 {
		prev = append(prev, fmt.Sprintf(`"%c%d": {"v": %d}`, 'a'+i%26, i, i))
		next = append(next, fmt.Sprintf(`"%c%d": {"v": %d}`, 'a'+i%26, i, i*2))
	}
	p, n := []byte("{"+strings.Join(prev, ",")+"}"), []byte("{"+strings.Join(next, ",")+"}")
	first := Delta(p, n, "application/json")
	assert.IsIncreasing(t, first.GetChangedPaths())
	for range 50 {
		again := Delta(p, n, "application/json")
		require.Equal(t, first.GetChangedPaths(), again.GetChangedPaths())
		require.Equal(t, first.GetMagnitude(), again.GetMagnitude())
	}
}

func TestTokens(t *testing.T) {
	for n, want := range map[int]uint64{0: 0, 1: 1, 3: 1, 4: 1, 5: 2, 8: 2, 9: 3, 4000: 1000} {
		assert.Equal(t, want, Tokens(make([]byte, n)), "%d bytes", n)
	}
}

// FuzzDelta: Delta never panics, its magnitude lies in [0,1], at most MaxChangedPaths paths,
// sorted, and a draft compared with itself has no change.
func FuzzDelta(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a": 1}`, `{"a": 2}`},
		{`[1, [2, {"x": null}]]`, `[1, [2, {"x": false}], 3]`},
		{`{"a/b": {"~": []}}`, `{"a/b": {"~": {}}}`},
		{`1e999`, `1e999`},
		{`{"a": 1, "a": 2}`, `{"a": 2}`},
		{`"x"`, `{`},
		{"", ""},
		{"plain text", "plain text."},
	} {
		f.Add([]byte(s[0]), []byte(s[1]), true)
		f.Add([]byte(s[0]), []byte(s[1]), false)
	}
	f.Fuzz(func(t *testing.T, prev, next []byte, json bool) {
		ct := "text/plain"
		if json {
			ct = "application/json"
		}
		d := Delta(prev, next, ct)
		m := d.GetMagnitude()
		if !(m >= 0 && m <= 1) {
			t.Fatalf("magnitude %v outside [0,1]", m)
		}
		if len(d.GetChangedPaths()) > MaxChangedPaths {
			t.Fatalf("%d paths", len(d.GetChangedPaths()))
		}
		if (m == 0) != (len(d.GetChangedPaths()) == 0) {
			t.Fatalf("magnitude %v with paths %q", m, d.GetChangedPaths())
		}
		for i := 1; i < len(d.GetChangedPaths()); i++ {
			if d.GetChangedPaths()[i-1] >= d.GetChangedPaths()[i] {
				t.Fatalf("paths not sorted and unique: %q", d.GetChangedPaths())
			}
		}
		for _, x := range [][]byte{prev, next} {
			if x == nil {
				continue
			}
			if self := Delta(x, x, ct); self.GetMagnitude() != 0 || len(self.GetChangedPaths()) != 0 {
				t.Fatalf("Delta(x, x) = %v for %q", self, x)
			}
		}
	})
}
