package test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/worker"
)

// historiesDir holds workflow histories recorded from real runs against the dev server.
const historiesDir = "testdata/histories"

// TestReplayRecordedHistories replays every recorded history against today's workflow code:
// a change that would break the determinism of runs already in flight fails here. Refresh the
// recordings deliberately with `SW4RM_RECORD_HISTORIES=1 go test ./test/`.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in %s", historiesDir)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}

// recordHistory writes a finished run's history to testdata when SW4RM_RECORD_HISTORIES=1.
func recordHistory(t testing.TB, tc client.Client, workflowID, name string) {
	recordRunHistory(t, tc, workflowID, "", name)
}

// recordRunHistory is recordHistory of one run of the workflow ("" for its latest).
func recordRunHistory(t testing.TB, tc client.Client, workflowID, runID, name string) {
	if os.Getenv("SW4RM_RECORD_HISTORIES") != "1" {
		return
	}
	iter := tc.GetWorkflowHistory(context.Background(), workflowID, runID, false, 0)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(historiesDir, name+".json"), b, 0o644))
}
