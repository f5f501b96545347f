package workflows

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/workflow"
)

// Temporal's user metadata — a run's static summary and details, an activity's or a timer's
// summary, a run's current details — is what the Temporal UI lists beside a run, an event or
// a child, so a person reads "DAG wf node build on agent-1" rather than "TaskWorkflow". It is
// not part of the commands Temporal compares on replay (the SDK's isCommandMatchEvent matches
// activities by ID and type, timers by ID, children by ID and type), so adding or changing it
// needs no workflow.GetVersion and recorded histories replay as before.

// maxSummary bounds a summary: the UI shows one line, and the server limits its size.
const maxSummary = 200

// summary formats a one-line summary, cut on a character at maxSummary bytes.
func summary(format string, args ...any) string {
	s := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	if len(s) <= maxSummary {
		return s
	}
	cut := maxSummary - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// TaskSummary is the static summary of a task's run: what runs where.
func TaskSummary(in TaskInput) string {
	return summary("task %s on agent %s, priority %d", in.TaskID, in.AgentID, in.Priority)
}

// ToolSummary is the static summary of a tool call's run and of its attempt's activity.
func ToolSummary(in ToolCallInput) string {
	r := in.Request
	s := fmt.Sprintf("tool %s of provider %s, privilege %s", r.ToolName, r.ProviderID, r.Policy.Privilege)
	if in.Caller != "" {
		s += ", called by " + in.Caller
	}
	return summary("%s", s)
}

// admitWaitTimer is the timer of a task's wait for SubmitTask's word (FrontendAdmitWait).
var admitWaitTimer = workflow.TimerOptions{Summary: "wait for SubmitTask's admission of the task"}

// sleep is workflow.Sleep with the timer's summary: what the wait is for.
func sleep(ctx workflow.Context, d time.Duration, what string) error {
	return workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary("%s", what)}).Get(ctx, nil)
}

// taskDetails are a task run's current details: its state and the reason of its last
// transition, as Markdown.
func taskDetails(state, reason string) string {
	if reason == "" {
		return "**" + state + "**"
	}
	return "**" + state + "** " + summary("%s", reason)
}
