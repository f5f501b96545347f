package telemetry

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TracesPath is where an OTLP/HTTP exporter posts its traces.
const TracesPath = "/v1/traces"

// maxExportBytes bounds one export request's body, after gzip is undone.
const maxExportBytes = 32 << 20

// Span is one received span, flattened to what a person reads: a line of the file a
// Collector writes.
type Span struct {
	// TraceID and SpanID are hex, as in `traceparent`; ParentSpanID is empty for a root.
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	// Name is the span's name; Service the exporting process's service.name.
	Name    string `json:"name"`
	Service string `json:"service,omitempty"`
	// Kind is SERVER, CLIENT, INTERNAL, PRODUCER or CONSUMER.
	Kind string `json:"kind"`
	// Start and End are the span's times.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Status is OK, ERROR or empty (unset), with its message.
	Status        string `json:"status,omitempty"`
	StatusMessage string `json:"status_message,omitempty"`
	// Attributes are the span's attributes, as strings.
	Attributes map[string]string `json:"attributes,omitempty"`
	// Events are the names of the span's events, in order.
	Events []string `json:"events,omitempty"`
}

// Duration is End - Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// Collector is a small OTLP/HTTP trace receiver for a laptop (`sw4rm traces collect`, which
// `SW4RM_TRACING=1 make dev` starts): it accepts exports on TracesPath, protobuf or JSON,
// gzip-compressed or not, and appends each span as one JSON line (Span) to its writer, which
// `sw4rm traces show` reads. A team with a tracing backend points OTEL_EXPORTER_OTLP_ENDPOINT
// at that instead.
type Collector struct {
	mu sync.Mutex
	w  io.Writer
}

// NewCollector returns a collector that writes to w.
func NewCollector(w io.Writer) *Collector { return &Collector{w: w} }

// ServeHTTP receives one export.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != TracesPath {
		http.Error(w, "POST "+TracesPath+" only", http.StatusNotFound)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, "gzip: "+err.Error(), http.StatusBadRequest)
			return
		}
		defer func() { _ = zr.Close() }()
		body = zr
	}
	data, err := io.ReadAll(io.LimitReader(body, maxExportBytes+1))
	if err != nil || len(data) > maxExportBytes {
		http.Error(w, "body unreadable or over 32 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := ct == "application/json"
	if isJSON {
		err = protojson.Unmarshal(data, &req)
	} else {
		err = proto.Unmarshal(data, &req)
	}
	if err != nil {
		http.Error(w, "not an OTLP ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := c.write(Flatten(&req)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	var out []byte
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		out, _ = protojson.Marshal(resp)
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ = proto.Marshal(resp)
	}
	_, _ = w.Write(out)
}

// write appends spans as JSON lines, one export at a time so that lines never interleave.
func (c *Collector) write(spans []Span) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	enc := json.NewEncoder(c.w)
	for _, s := range spans {
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("write span: %w", err)
		}
	}
	return nil
}

// Flatten turns an OTLP export into Spans.
func Flatten(req *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = valueText(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				out = append(out, flattenSpan(sp, service))
			}
		}
	}
	return out
}

func flattenSpan(sp *tracepb.Span, service string) Span {
	s := Span{
		TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
		Name: sp.GetName(), Service: service,
		Kind:  strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_"),
		Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(), //nolint:gosec // nanoseconds since 1970 fit an int64 until 2262
		End:   time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),   //nolint:gosec // as above
	}
	if len(sp.GetParentSpanId()) > 0 {
		s.ParentSpanID = hex.EncodeToString(sp.GetParentSpanId())
	}
	if code := sp.GetStatus().GetCode(); code != tracepb.Status_STATUS_CODE_UNSET {
		s.Status = strings.TrimPrefix(code.String(), "STATUS_CODE_")
		s.StatusMessage = sp.GetStatus().GetMessage()
	}
	for _, kv := range sp.GetAttributes() {
		if s.Attributes == nil {
			s.Attributes = map[string]string{}
		}
		s.Attributes[kv.GetKey()] = valueText(kv.GetValue())
	}
	for _, e := range sp.GetEvents() {
		s.Events = append(s.Events, e.GetName())
	}
	return s
}

// valueText writes an attribute's value as text.
func valueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	default:
		b, _ := protojson.Marshal(v)
		return string(b)
	}
}

// ReadSpans reads the JSON lines a Collector wrote.
func ReadSpans(r io.Reader) ([]Span, error) {
	var out []Span
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var s Span
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// TraceSummary is one trace of a span file: its root span, size and extent.
type TraceSummary struct {
	// TraceID is the trace's id.
	TraceID string
	// Root is the name of its earliest span without a parent among the spans received (or
	// of its earliest span, when the root was not received).
	Root string
	// Spans is how many spans were received.
	Spans int
	// Start and End bound the spans received.
	Start, End time.Time
}

// Summarize lists the traces of spans, oldest first.
func Summarize(spans []Span) []TraceSummary {
	by := map[string]*TraceSummary{}
	var order []*TraceSummary
	roots := map[string]time.Time{}
	for _, s := range spans {
		t := by[s.TraceID]
		if t == nil {
			t = &TraceSummary{TraceID: s.TraceID, Start: s.Start, End: s.End}
			by[s.TraceID] = t
			order = append(order, t)
		}
		t.Spans++
		if s.Start.Before(t.Start) {
			t.Start = s.Start
		}
		if s.End.After(t.End) {
			t.End = s.End
		}
		// A root wins over any non-root; among roots (or among non-roots) the earliest wins.
		at, seen := roots[s.TraceID]
		isRoot := s.ParentSpanID == ""
		if t.Root == "" || (isRoot && (!seen || s.Start.Before(at))) {
			t.Root = s.Name
			if isRoot {
				roots[s.TraceID] = s.Start
			}
		}
	}
	out := make([]TraceSummary, len(order))
	for i, t := range order {
		out[i] = *t
	}
	slices.SortStableFunc(out, func(a, b TraceSummary) int { return a.Start.Compare(b.Start) })
	return out
}

// WriteTree writes one trace's spans as an indented tree, children in start order, each with
// its service, offset from the trace's start, duration and status. Spans whose parent was
// not received are shown at the top level.
func WriteTree(w io.Writer, spans []Span, traceID string) error {
	var mine []Span
	ids := map[string]bool{}
	for _, s := range spans {
		if s.TraceID == traceID {
			mine = append(mine, s)
			ids[s.SpanID] = true
		}
	}
	if len(mine) == 0 {
		return fmt.Errorf("no span of trace %s", traceID)
	}
	slices.SortStableFunc(mine, func(a, b Span) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.SpanID, b.SpanID))
	})
	children := map[string][]Span{}
	for _, s := range mine {
		parent := s.ParentSpanID
		if !ids[parent] {
			parent = ""
		}
		children[parent] = append(children[parent], s)
	}
	t0 := mine[0].Start
	var walk func(parent string, depth int) error
	walk = func(parent string, depth int) error {
		for _, s := range children[parent] {
			line := fmt.Sprintf("%s%s  [%s %s] +%s %s", strings.Repeat("  ", depth), s.Name, s.Service, strings.ToLower(s.Kind),
				s.Start.Sub(t0).Round(time.Microsecond), s.Duration().Round(time.Microsecond))
			if s.Status == "ERROR" {
				line += "  ERROR " + s.StatusMessage
			}
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
			if err := walk(s.SpanID, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("", 0)
}
