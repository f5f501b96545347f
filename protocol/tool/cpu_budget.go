package tool

import (
	"fmt"
	"strconv"
)

// NoteAgentCPUBudget adds to notes the policy note of a call with budget_cpu_ms to a tool
// that agent provides (notes unchanged without a budget or an agent). The scheduler cannot
// measure the CPU time of an agent's own process, so it neither ignores the budget silently
// nor refuses the call: §18.2's TOOL_CALL carries the execution_policy to the provider, the
// agent receives budget_cpu_ms in it and is the implementation §18.5.1 binds to terminate
// the tool and answer CPU_BUDGET_EXCEEDED; the note tells the caller so.
func NoteAgentCPUBudget(notes []string, p Policy, agent string) []string {
	if p.BudgetCPU <= 0 || agent == "" {
		return notes
	}
	return append(notes, fmt.Sprintf("budget_cpu_ms %d is enforced by provider agent %s, which receives it in the TOOL_CALL's execution_policy; the scheduler cannot measure an agent's CPU time (§18.2, §18.5.1)",
		p.BudgetCPU.Milliseconds(), strconv.Quote(agent)))
}
