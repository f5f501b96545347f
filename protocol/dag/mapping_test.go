package dag

import (
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// rfc6901Doc is the example document of RFC 6901 §5.
const rfc6901Doc = `{
  "foo": ["bar", "baz"],
  "": 0,
  "a/b": 1,
  "c%d": 2,
  "e^f": 3,
  "g|h": 4,
  "i\\j": 5,
  "k\"l": 6,
  " ": 7,
  "m~n": 8
}`

// TestPointerRFC6901Examples resolves every pointer of RFC 6901 §5 (JSON String
// Representation) in its example document.
func TestPointerRFC6901Examples(t *testing.T) {
	doc, err := decodeJSON([]byte(rfc6901Doc))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ ptr, want string }{
		{"", "WHOLE"},
		{"/foo", `["bar","baz"]`},
		{"/foo/0", `"bar"`},
		{"/", "0"},
		{"/a~1b", "1"},
		{"/c%d", "2"},
		{"/e^f", "3"},
		{"/g|h", "4"},
		{`/i\j`, "5"},
		{`/k"l`, "6"},
		{"/ ", "7"},
		{"/m~0n", "8"},
	}
	for _, tt := range tests {
		p, err := parseRef(tt.ptr)
		if err != nil {
			t.Fatalf("parse %q: %v", tt.ptr, err)
		}
		v, found := get(doc, p)
		if !found {
			t.Fatalf("%q not found", tt.ptr)
		}
		got, _ := encodeJSON(v)
		if tt.want == "WHOLE" {
			if _, isObject := v.(map[string]any); !isObject || len(v.(map[string]any)) != 10 {
				t.Errorf("%q = %s, want the whole document", tt.ptr, got)
			}
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%q = %s, want %s", tt.ptr, got, tt.want)
		}
		if p.String() != tt.ptr {
			t.Errorf("%q renders back as %q", tt.ptr, p.String())
		}
	}
}

func TestPointerEdges(t *testing.T) {
	doc, _ := decodeJSON([]byte(`{"a":{"b":[10,{"c":true}]},"~1":"tilde-one","s":"str"}`))
	tests := []struct {
		ptr   string
		want  string
		found bool
	}{
		{"/a/b/1/c", "true", true},
		{"a", `{"b":[10,{"c":true}]}`, true}, // a plain key
		{"~1", `"tilde-one"`, true},          // plain keys are literal: no unescaping
		{"/~01", `"tilde-one"`, true},        // "~01" unescapes to "~1", not to "/"
		{"/a/b/01", "", false},               // leading zero is no index (RFC 6901 §4)
		{"/a/b/2", "", false},
		{"/a/b/-", "", false}, // "-" names the element after the last
		{"/a/b/x", "", false},
		{"/s/0", "", false}, // into a scalar
		{"/missing/deep", "", false},
	}
	for _, tt := range tests {
		p, err := parseRef(tt.ptr)
		if err != nil {
			t.Fatalf("parse %q: %v", tt.ptr, err)
		}
		v, found := get(doc, p)
		if found != tt.found {
			t.Fatalf("%q found=%v, want %v", tt.ptr, found, tt.found)
		}
		if got, _ := encodeJSON(v); found && string(got) != tt.want {
			t.Errorf("%q = %s, want %s", tt.ptr, got, tt.want)
		}
	}
	for _, bad := range []string{"/~", "/a~", "/~2", "/a/~x"} {
		if _, err := parseRef(bad); err == nil {
			t.Errorf("parseRef(%q) accepted a bad escape", bad)
		}
	}
}

func node(in, out map[string]string) *workflowpb.WorkflowNode {
	return &workflowpb.WorkflowNode{NodeId: "x", AgentId: "agent", InputMapping: in, OutputMapping: out}
}

func TestInput(t *testing.T) {
	data := `{"records":[1,2],"cfg":{"a/b":{"big":12345678901234567890}},"html":"<b>&</b>"}`
	tests := []struct {
		name string
		in   map[string]string
		data string
		want string
	}{
		{"the spec's example (000 §3.11.3)", map[string]string{"input_records": "records"}, data, `{"input_records":[1,2]}`},
		{"pointers, escapes, exact numbers", map[string]string{"n": "/cfg/a~1b/big", "first": "/records/0"}, data, `{"first":1,"n":12345678901234567890}`},
		{"missing values are left out", map[string]string{"gone": "/nope", "r": "records"}, data, `{"r":[1,2]}`},
		{"no mapping: the whole workflow_data", nil, data, `{"cfg":{"a/b":{"big":12345678901234567890}},"html":"<b>&</b>","records":[1,2]}`},
		{"empty workflow_data is {}", map[string]string{"a": "/a"}, "", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Input(node(tt.in, nil), []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Input = %s, want %s", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`[1]`, `{"a":`, `{} {}`, `"s"`} {
		if _, err := Input(node(nil, nil), []byte(bad)); err == nil {
			t.Errorf("Input accepted workflow_data %s", bad)
		}
	}
}

func TestApplyOutput(t *testing.T) {
	tests := []struct {
		name       string
		out        map[string]string
		data, outp string
		want       string
	}{
		{"the spec's example (000 §3.11.3)", map[string]string{"parsed_records": "records"}, `{}`, `{"parsed_records":[1,2]}`, `{"records":[1,2]}`},
		{"creates objects on the way", map[string]string{"/r/url": "/build/artifact/url"}, `{"keep":1}`, `{"r":{"url":"s3://x"}}`, `{"build":{"artifact":{"url":"s3://x"}},"keep":1}`},
		{"whole output", map[string]string{"": "/last"}, `{"last":"old"}`, `{"ok":true}`, `{"last":{"ok":true}}`},
		{"text output as a string", map[string]string{"": "log"}, ``, `build passed`, `{"log":"build passed"}`},
		{"append to an array", map[string]string{"v": "/list/-"}, `{"list":[1]}`, `{"v":2}`, `{"list":[1,2]}`},
		{"replace an element", map[string]string{"v": "/list/0"}, `{"list":[1]}`, `{"v":9}`, `{"list":[9]}`},
		{"null on the way becomes an object", map[string]string{"v": "/a/b"}, `{"a":null}`, `{"v":1}`, `{"a":{"b":1}}`},
		{"no mapping: unchanged", nil, `{"a":1}`, `{"v":1}`, `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ApplyOutput(node(nil, tt.out), []byte(tt.data), []byte(tt.outp))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("ApplyOutput = %s, want %s", got, tt.want)
			}
		})
	}
	bad := []struct {
		name       string
		out        map[string]string
		data, outp string
		want       string
	}{
		{"source missing", map[string]string{"r": "/x"}, `{}`, `{"other":1}`, `output has no "r"`},
		{"text output, keyed source", map[string]string{"r": "/x"}, `{}`, `plain text`, `output has no "r"`},
		{"through a scalar", map[string]string{"v": "/s/t"}, `{"s":"str"}`, `{"v":1}`, "/s is a string, not an object or array"},
		{"index out of range", map[string]string{"v": "/l/5"}, `{"l":[]}`, `{"v":1}`, "is an array of 0 elements"},
		{"append in the middle", map[string]string{"v": "/l/-/x"}, `{"l":[]}`, `{"v":1}`, `"-" (append) must be the last token`},
		{"workflow_data not an object", map[string]string{"v": "/x"}, `[]`, `{"v":1}`, "workflow_data must be a JSON object, not an array"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ApplyOutput(node(nil, tt.out), []byte(tt.data), []byte(tt.outp))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want …%s…", err, tt.want)
			}
		})
	}
}

// The merge order: applying the outputs of a batch of finished nodes in Result.Order gives
// one workflow_data whatever the order they finished in.
func TestMergeInTopologicalOrder(t *testing.T) {
	def := wf(outputs(n("a"), "v", "/log"), outputs(n("b", "a"), "v", "/log/b"), outputs(n("c", "a"), "v", "/log/c"))
	res, err := Validate(def)
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]string{"a": `{"v":{"from":"a"}}`, "b": `{"v":"B"}`, "c": `{"v":"C"}`}
	data := []byte(`{}`)
	for _, x := range res.Order {
		if data, err = ApplyOutput(def.Nodes[x], data, []byte(outs[x])); err != nil {
			t.Fatal(err)
		}
	}
	if want := `{"log":{"b":"B","c":"C","from":"a"}}`; string(data) != want {
		t.Errorf("merged %s, want %s", data, want)
	}
}
