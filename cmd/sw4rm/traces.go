package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// defaultTracesFile is where `sw4rm traces collect` writes and `sw4rm traces show` reads,
// under the working directory (`make dev` runs from the repository root).
const defaultTracesFile = ".tmp/traces.jsonl"

// newTracesCmd is `sw4rm traces`: a laptop's OTLP receiver and a reader of what it received.
func newTracesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "traces",
		Short: "Receive OpenTelemetry traces on a laptop and show them (docs/observability.md)",
	}
	var addr, file string
	collect := &cobra.Command{
		Use:   "collect",
		Short: "Receive OTLP/HTTP trace exports and append their spans to a file, one JSON line each",
		Long: "Receive OTLP/HTTP trace exports (what SW4RM_TRACING=1 sends to OTEL_EXPORTER_OTLP_ENDPOINT) and append " +
			"their spans to a file, one JSON line each. SW4RM_TRACING=1 make dev starts it. Runs until interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
				return err
			}
			f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			lis, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: telemetry.NewCollector(f), ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "receiving OTLP/HTTP traces on http://%s%s, writing %s\n", lis.Addr(), telemetry.TracesPath, file)
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	collect.Flags().StringVar(&addr, "addr", "127.0.0.1:4318", "listen address (4318 is OTLP/HTTP's port)")
	collect.Flags().StringVar(&file, "file", defaultTracesFile, "file the spans are appended to")

	var showFile string
	var last int
	show := &cobra.Command{
		Use:   "show [TRACE_ID]",
		Short: "List the traces received, or show one as a tree of spans",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(showFile)
			if err != nil {
				return fmt.Errorf("%w (is sw4rm traces collect running? SW4RM_TRACING=1 make dev starts it)", err)
			}
			defer func() { _ = f.Close() }()
			spans, err := telemetry.ReadSpans(f)
			if err != nil {
				return fmt.Errorf("%s: %w", showFile, err)
			}
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				return telemetry.WriteTree(out, spans, args[0])
			}
			sums := telemetry.Summarize(spans)
			if last > 0 && len(sums) > last {
				sums = sums[len(sums)-last:]
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "TRACE ID\tSTART\tDURATION\tSPANS\tROOT")
			for _, s := range sums {
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.TraceID, s.Start.Local().Format("15:04:05.000"),
					s.End.Sub(s.Start).Round(time.Microsecond), s.Spans, s.Root)
			}
			return tw.Flush()
		},
	}
	show.Flags().StringVar(&showFile, "file", defaultTracesFile, "file sw4rm traces collect wrote")
	show.Flags().IntVar(&last, "last", 20, "list only the last N traces; 0 lists all")
	cmd.AddCommand(collect, show)
	return cmd
}
