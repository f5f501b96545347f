package tool

import (
	"strings"
	"testing"
	"time"
)

func TestNoteAgentCPUBudget(t *testing.T) {
	if got := NoteAgentCPUBudget([]string{"a"}, Policy{}, "coder"); len(got) != 1 {
		t.Errorf("without a budget: %q", got)
	}
	if got := NoteAgentCPUBudget(nil, Policy{BudgetCPU: time.Second}, ""); len(got) != 0 {
		t.Errorf("without an agent: %q", got)
	}
	got := NoteAgentCPUBudget([]string{"a"}, Policy{BudgetCPU: 1500 * time.Millisecond}, "coder")
	if len(got) != 2 || !strings.Contains(got[1], `budget_cpu_ms 1500 is enforced by provider agent "coder"`) {
		t.Errorf("notes = %q", got)
	}
}
