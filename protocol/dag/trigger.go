package dag

import (
	"errors"
	"fmt"

	"github.com/robfig/cron/v3"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// Triggers (§17.7 "Trigger Types"): DEPENDENCY (the default, also for an unspecified
// trigger_type) runs a node once all its dependencies are satisfied; MANUAL and EVENT wait,
// in addition, for an outside trigger; SCHEDULE waits, in addition, for the next time its
// cron expression names (metadata "schedule"). A dependency is satisfied when it is
// COMPLETED (§17.7: a node MUST NOT run until all its dependencies are COMPLETED).
// Conditions: metadata "skip_if" makes a node SKIPPED instead of run; a node with a SKIPPED
// dependency is SKIPPED in turn, unless its metadata "after_skipped" is "run" — then the
// SKIPPED dependency counts as satisfied, and the node finds absent whatever the skipped node
// would have written (see Input).

// The values of metadata "after_skipped" (MetaAfterSkipped).
const (
	// AfterSkippedSkip, the default, skips a node one of whose dependencies was SKIPPED: it
	// can never have all of them COMPLETED, so it is bypassed with them.
	AfterSkippedSkip = "skip"
	// AfterSkippedRun lets a SKIPPED dependency count as satisfied, so the node runs once its
	// other dependencies are COMPLETED (or SKIPPED).
	AfterSkippedRun = "run"
)

// RunsAfterSkipped reports whether a SKIPPED dependency counts as satisfied for node: its
// metadata "after_skipped" is "run".
func RunsAfterSkipped(node *workflowpb.WorkflowNode) bool {
	return node.GetMetadata()[MetaAfterSkipped] == AfterSkippedRun
}

// ParseSchedule returns the schedule of a SCHEDULE node, from its metadata "schedule": a
// standard cron expression of five fields (minute hour day-of-month month day-of-week), a
// descriptor (@yearly, @monthly, @weekly, @daily, @hourly, @every <duration>), optionally
// prefixed by "CRON_TZ=<zone>"; times without a zone are UTC when the caller passes UTC
// times to Next. Parsed by github.com/robfig/cron/v3; Next is a pure function of its
// argument, so workflow code may call it with workflow.Now.
func ParseSchedule(node *workflowpb.WorkflowNode) (cron.Schedule, error) {
	expr, ok := node.GetMetadata()[MetaSchedule]
	if !ok {
		return nil, fmt.Errorf("node %q has no metadata %q", node.GetNodeId(), MetaSchedule)
	}
	s, err := parseCron(expr)
	if err != nil {
		return nil, fmt.Errorf("node %q: metadata %s=%q: %w", node.GetNodeId(), MetaSchedule, short(expr), err)
	}
	return s, nil
}

func parseCron(expr string) (cron.Schedule, error) {
	if expr == "" {
		return nil, errors.New("empty cron expression")
	}
	return cron.ParseStandard(expr)
}

// Skip reports whether a node is to be SKIPPED: its metadata "skip_if" names a value in
// workflow_data (a JSON Pointer or a top-level key) and that value is JSON true. Absent,
// null or false runs the node; any other value is an error, so that a mistyped condition
// (the string "true", a number) is not silently read as false.
func Skip(node *workflowpb.WorkflowNode, data []byte) (bool, error) {
	ref, ok := node.GetMetadata()[MetaSkipIf]
	if !ok {
		return false, nil
	}
	p, err := parseRef(ref)
	if err != nil {
		return false, fmt.Errorf("node %q: metadata %s: %w", node.GetNodeId(), MetaSkipIf, err)
	}
	doc, err := workflowData(data)
	if err != nil {
		return false, err
	}
	v, _ := get(doc, p)
	switch v := v.(type) {
	case nil:
		return false, nil // absent or null
	case bool:
		return v, nil
	default:
		return false, fmt.Errorf("node %q: metadata %s=%q names %s in workflow_data; it must be true, false, null or absent", node.GetNodeId(), MetaSkipIf, ref, aKind(v))
	}
}

// LateBinding reports whether the definition lets its nodes name agents that are not
// registered yet (definition metadata "late_binding" = "true"); CreateWorkflow refuses an
// unregistered agent otherwise.
func LateBinding(def *workflowpb.WorkflowDefinition) bool {
	return def.GetMetadata()[MetaLateBinding] == "true"
}
