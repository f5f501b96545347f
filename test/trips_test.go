package test

import (
	"context"
	"testing"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// trips counts what one workflow's history cost Temporal: the workflow tasks it took, the
// activities and local activities (markers) it ran, the signals it received and sent, the
// updates it accepted, and its search-attribute upserts — the trips docs/benchmarks.md tallies per SW4RM task.
type trips struct {
	workflowTasks, activities, localActivities, signalsIn, signalsOut, updatesIn, upserts int
}

// add adds o to t.
func (t *trips) add(o trips) {
	t.workflowTasks += o.workflowTasks
	t.activities += o.activities
	t.localActivities += o.localActivities
	t.signalsIn += o.signalsIn
	t.signalsOut += o.signalsOut
	t.updatesIn += o.updatesIn
	t.upserts += o.upserts
}

// tripsOf reads the history of workflow wid (its latest run) and counts its trips.
func tripsOf(ctx context.Context, tb testing.TB, c client.Client, wid string) trips {
	tb.Helper()
	var t trips
	it := c.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			tb.Fatalf("history of %s: %v", wid, err)
		}
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			t.workflowTasks++
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			t.activities++
		case enums.EVENT_TYPE_MARKER_RECORDED:
			t.localActivities++
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			t.signalsIn++
		case enums.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			t.signalsOut++
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			t.updatesIn++
		case enums.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			t.upserts++
		}
	}
	return t
}

// report reports t divided over n operations as benchmark metrics.
func (t trips) report(b *testing.B, n int) {
	f := func(v int) float64 { return float64(v) / float64(n) }
	b.ReportMetric(f(t.workflowTasks), "wft/op")
	b.ReportMetric(f(t.activities), "acts/op")
	b.ReportMetric(f(t.localActivities), "local-acts/op")
	b.ReportMetric(f(t.signalsIn), "signals/op")
	b.ReportMetric(f(t.updatesIn), "updates/op")
	b.ReportMetric(f(t.upserts), "upserts/op")
}
