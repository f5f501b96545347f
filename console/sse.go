package console

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// pollEvery is how often an event stream looks for a change.
const pollEvery = time.Second

// serveChanges is a Server-Sent Events stream that sends the event name each time the
// fingerprint poll returns changes (a hash of what a page shows, read through the frontend),
// and a comment every 15 s so proxies keep the stream open. The stream compares with the
// fingerprint of what the page showed when the request names it (?fp=), else with its own
// first poll: a change between the page's rendering and the stream's start is then sent too. htmx's SSE extension reloads the
// page's fragment on the event (sse-connect and hx-trigger="sse:<name>"), so a change made
// through any door — CLI, gRPC, a signal, another console — shows within pollEvery. A poll
// that fails ends the stream with an "error" event; the browser's EventSource reconnects.
func serveChanges(w http.ResponseWriter, r *http.Request, name string, poll func(ctx context.Context) (string, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	ctx := r.Context()
	last := r.URL.Query().Get("fp")
	var err error
	if last == "" {
		last, err = poll(ctx)
	}
	if err != nil {
		_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", sseData(err.Error()))
		flusher.Flush()
		return
	}
	_, _ = fmt.Fprint(w, "retry: 2000\n: connected\n\n")
	flusher.Flush()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	quiet := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fp, err := poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", sseData(err.Error()))
				flusher.Flush()
			}
			return
		}
		switch {
		case fp != last:
			last, quiet = fp, time.Now()
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, sseData(fp))
			flusher.Flush()
		case time.Since(quiet) >= 15*time.Second:
			quiet = time.Now()
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		}
	}
}

// sseData is s on one line, as an SSE data field must be.
func sseData(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
