package telemetry

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// lockedBuffer is a bytes.Buffer safe for the collector's writes and the test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCollectorReceivesOTLPHTTP exports a small trace with the real OTLP/HTTP exporter, gzip
// on and off, and reads it back as the tree `sw4rm traces show` prints.
func TestCollectorReceivesOTLPHTTP(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(t *testing.T) {
			var out lockedBuffer
			srv := httptest.NewServer(NewCollector(&out))
			defer srv.Close()
			opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(srv.URL + TracesPath)}
			if gz {
				opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
			}
			exp, err := otlptracehttp.New(context.Background(), opts...)
			require.NoError(t, err)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
				sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("sw4rm-test"))))
			tr := tp.Tracer("test")

			ctx, root := tr.Start(context.Background(), "dag run", trace.WithSpanKind(trace.SpanKindServer))
			_, a := tr.Start(ctx, "node a")
			a.End()
			_, b := tr.Start(ctx, "node b")
			b.SetStatus(codes.Error, "tool_failed")
			b.End()
			root.End()
			require.NoError(t, tp.Shutdown(context.Background()))

			spans, err := ReadSpans(strings.NewReader(out.String()))
			require.NoError(t, err)
			require.Len(t, spans, 3)
			sums := Summarize(spans)
			require.Len(t, sums, 1)
			require.Equal(t, "dag run", sums[0].Root)
			require.Equal(t, 3, sums[0].Spans)
			require.Equal(t, root.SpanContext().TraceID().String(), sums[0].TraceID)

			var tree strings.Builder
			require.NoError(t, WriteTree(&tree, spans, sums[0].TraceID))
			lines := strings.Split(strings.TrimSpace(tree.String()), "\n")
			require.Len(t, lines, 3, tree.String())
			require.True(t, strings.HasPrefix(lines[0], "dag run  [sw4rm-test server]"), lines[0])
			require.True(t, strings.HasPrefix(lines[1], "  node a  [sw4rm-test internal]"), lines[1])
			require.True(t, strings.HasPrefix(lines[2], "  node b  "), lines[2])
			require.Contains(t, lines[2], "ERROR tool_failed")
		})
	}
}

// TestCollectorRefusesBadExports answers 400 to a body that is not an export, and 404 to
// other paths, writing nothing.
func TestCollectorRefusesBadExports(t *testing.T) {
	var out lockedBuffer
	srv := httptest.NewServer(NewCollector(&out))
	defer srv.Close()
	resp, err := http.Post(srv.URL+TracesPath, "application/x-protobuf", strings.NewReader("\xff\xff not protobuf"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, err = http.Post(srv.URL+TracesPath, "application/json", strings.NewReader("{nope"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, err = http.Post(srv.URL+"/v1/metrics", "application/x-protobuf", strings.NewReader(""))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Empty(t, out.String())
}

// TestWriteTreeUnknownTrace says which trace is missing.
func TestWriteTreeUnknownTrace(t *testing.T) {
	err := WriteTree(&strings.Builder{}, nil, "abc")
	require.ErrorContains(t, err, "no span of trace abc")
}
