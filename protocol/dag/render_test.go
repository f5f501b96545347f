package dag

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

var update = flag.Bool("update", false, "rewrite the golden files of the pictures")

// pipeline is the definition of the pictures: the build → {unit tests, lint} →
// package → deploy pipeline, with a MANUAL deploy and a label that needs escaping.
func pipeline() *workflowpb.WorkflowDefinition {
	def := wf(n("build"), n("unit-tests", "build"), n("lint", "build"), n("package", "unit-tests", "lint"),
		with(n("deploy", "package"), func(x *workflowpb.WorkflowNode) { x.TriggerType = workflowpb.TriggerType_MANUAL }),
		// "end" is a Mermaid keyword; the agent id carries characters both syntaxes read.
		with(n("end", "deploy"), func(x *workflowpb.WorkflowNode) { x.AgentId = `say "done" <#1> [a|b] \n` }))
	def.WorkflowId = `release "v2"`
	return def
}

func TestPictures(t *testing.T) {
	states := map[string]workflowpb.NodeStatus{
		"build":      workflowpb.NodeStatus_COMPLETED,
		"unit-tests": workflowpb.NodeStatus_COMPLETED,
		"lint":       workflowpb.NodeStatus_SKIPPED,
		"package":    workflowpb.NodeStatus_FAILED,
		"deploy":     workflowpb.NodeStatus_PENDING,
		"ghost":      workflowpb.NodeStatus_RUNNING, // not in the definition: ignored
	}
	tests := []struct {
		golden string
		render func() string
	}{
		{"pipeline.mmd", func() string { return Mermaid(pipeline(), states) }},
		{"pipeline.dot", func() string { return DOT(pipeline(), states) }},
		{"definition.mmd", func() string { return Mermaid(pipeline(), nil) }},
		{"definition.dot", func() string { return DOT(pipeline(), nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got := tt.render()
			for range 10 { // the same text whatever the map order
				if again := tt.render(); again != got {
					t.Fatalf("rendered differently:\n%s\n---\n%s", got, again)
				}
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./protocol/dag -run TestPictures -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file:\n%s", tt.golden, got)
			}
		})
	}
}

func TestPicturesOfInvalidDefinitions(t *testing.T) {
	def := wf(n("a", "ghost", "a"), n("b", "a", "a"))
	def.Nodes["nil"] = nil
	want := "flowchart TD\n    n0[\"a<br/>agent: agent-a\"]\n    n1[\"b<br/>agent: agent-b\"]\n    n0 --> n0\n    n0 --> n1\n"
	if got := Mermaid(def, nil); got != want {
		t.Errorf("Mermaid =\n%s\nwant\n%s", got, want)
	}
}
