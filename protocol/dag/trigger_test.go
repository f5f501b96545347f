package dag

import (
	"strings"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

func TestParseSchedule(t *testing.T) {
	from := time.Date(2026, 3, 14, 10, 7, 0, 0, time.UTC)
	tests := []struct {
		expr string
		next time.Time
	}{
		{"*/15 * * * *", time.Date(2026, 3, 14, 10, 15, 0, 0, time.UTC)},
		{"0 9 * * MON", time.Date(2026, 3, 16, 9, 0, 0, 0, time.UTC)},
		{"@daily", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"@every 90s", from.Add(90 * time.Second)},
		{"CRON_TZ=Europe/Paris 0 12 * * *", time.Date(2026, 3, 14, 11, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		node := meta(n("s"), MetaSchedule, tt.expr)
		s, err := ParseSchedule(node)
		if err != nil {
			t.Fatalf("%q: %v", tt.expr, err)
		}
		if got := s.Next(from); !got.Equal(tt.next) {
			t.Errorf("%q: Next = %v, want %v", tt.expr, got, tt.next)
		}
	}
	for _, bad := range []string{"", "* * * *", "61 * * * *", "@fortnightly", "0 0 0 * * *"} {
		if _, err := ParseSchedule(meta(n("s"), MetaSchedule, bad)); err == nil {
			t.Errorf("ParseSchedule accepted %q", bad)
		}
	}
	if _, err := ParseSchedule(n("s")); err == nil || !strings.Contains(err.Error(), `no metadata "schedule"`) {
		t.Errorf("no schedule: %v", err)
	}
}

func TestSkip(t *testing.T) {
	data := []byte(`{"flags":{"skip_lint":true,"no":false,"nil":null,"str":"true","num":1}}`)
	tests := []struct {
		skipIf string // "" = no skip_if
		want   bool
		err    string
	}{
		{"", false, ""},
		{"/flags/skip_lint", true, ""},
		{"/flags/no", false, ""},
		{"/flags/nil", false, ""},
		{"/flags/absent", false, ""},
		{"flags", false, `names an object in workflow_data`},
		{"/flags/str", false, `names a string`},
		{"/flags/num", false, `names a number`},
		{"/~", false, `"~" must be followed by 0 or 1`},
	}
	for _, tt := range tests {
		node := n("x")
		if tt.skipIf != "" {
			node = meta(node, MetaSkipIf, tt.skipIf)
		}
		got, err := Skip(node, data)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("skip_if %q: error %v, want …%s…", tt.skipIf, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("skip_if %q: %v, %v; want %v", tt.skipIf, got, err, tt.want)
		}
	}
}

func TestLateBinding(t *testing.T) {
	def := wf(n("a"))
	if LateBinding(def) {
		t.Error("late binding without metadata")
	}
	def.Metadata = map[string]string{MetaLateBinding: "true"}
	if !LateBinding(def) {
		t.Error("late_binding=true not seen")
	}
	def.Metadata[MetaLateBinding] = "false"
	if LateBinding(def) {
		t.Error("late_binding=false read as true")
	}
	var nilDef *workflowpb.WorkflowDefinition
	if LateBinding(nilDef) {
		t.Error("nil definition")
	}
}
