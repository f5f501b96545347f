package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil))).With("agent_id", "a1").WithGroup("g")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))

	log.InfoContext(ctx, "traced", "correlation_id", "c1")
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	for _, want := range []string{"agent_id=a1", "g.correlation_id=c1", "trace_id=4bf92f3577b34da6a3ce929d0e0e4736", "span_id=00f067aa0ba902b7"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("traced line %q lacks %q", lines[0], want)
		}
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("untraced line %q has a trace_id", lines[1])
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.WithTraceParent(context.Background(), tp)
	if got := telemetry.TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	if telemetry.TraceParent(context.Background()) != "" || telemetry.SpanContextOf("garbage").IsValid() {
		t.Fatal("no span context should give none")
	}
}
