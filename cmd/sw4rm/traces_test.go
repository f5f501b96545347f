package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// TestTracesShow lists the traces of a span file and prints one as a tree.
func TestTracesShow(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	spans := []telemetry.Span{
		{TraceID: "t1", SpanID: "a", Name: "sw4rm.router.v1.RouterService/SendMessage", Service: "sw4rm-dev", Kind: "SERVER", Start: t0, End: t0.Add(3 * time.Millisecond)},
		{TraceID: "t1", SpanID: "b", ParentSpanID: "a", Name: "admit", Service: "sw4rm-dev", Kind: "INTERNAL", Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Millisecond)},
		{TraceID: "t2", SpanID: "c", Name: "RunWorkflow:DAGWorkflow", Service: "sw4rm-worker", Kind: "SERVER", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second)},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, s := range spans {
		require.NoError(t, enc.Encode(s))
	}
	file := filepath.Join(t.TempDir(), "traces.jsonl")
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o600))

	out, err := run(t, "traces", "show", "--file", file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, lines[1], "t1")
	require.Contains(t, lines[1], "SendMessage")
	require.Contains(t, lines[2], "DAGWorkflow")

	out, err = run(t, "traces", "show", "--file", file, "t1")
	require.NoError(t, err)
	require.Equal(t, "sw4rm.router.v1.RouterService/SendMessage  [sw4rm-dev server] +0s 3ms\n  admit  [sw4rm-dev internal] +1ms 1ms\n", out)

	_, err = run(t, "traces", "show", "--file", file, "nope")
	require.ErrorContains(t, err, "no span of trace nope")
	_, err = run(t, "traces", "show", "--file", filepath.Join(t.TempDir(), "absent.jsonl"))
	require.ErrorContains(t, err, "sw4rm traces collect")
}
