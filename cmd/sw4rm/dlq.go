package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// dlqMaxBundleBytes is how large an exported bundle the CLI accepts (gRPC's default is 4 MiB).
const dlqMaxBundleBytes = 512 << 20

// newDLQCmd builds `sw4rm dlq list|show|requeue|export`: thin clients of the DlqAdminService
// extension (§21.1), authenticated with an operator token.
func newDLQCmd() *cobra.Command {
	var of operatorFlags
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, requeue and export dead letters (§21.1)",
	}
	of.register(cmd)

	client := func(cmd *cobra.Command) (dlqadminpb.DlqAdminServiceClient, context.Context, func(), error) {
		conn, ctx, err := of.dial(cmd, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(dlqMaxBundleBytes)))
		if err != nil {
			return nil, nil, nil, err
		}
		return dlqadminpb.NewDlqAdminServiceClient(conn), ctx, func() { _ = conn.Close() }, nil
	}

	cmd.AddCommand(newDLQListCmd(client), newDLQShowCmd(client), newDLQRequeueCmd(client), newDLQExportCmd(client))
	return cmd
}

// dlqAdminDialer dials DlqAdminService for one command; the returned func closes the connection.
type dlqAdminDialer = func(*cobra.Command) (dlqadminpb.DlqAdminServiceClient, context.Context, func(), error)

// newDLQListCmd builds `sw4rm dlq list`.
func newDLQListCmd(client dlqAdminDialer) *cobra.Command {
	var lf dlqFilterFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead letters: failure time, class, code, producer, route, attempts, size, reason",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := lf.filter(time.Now())
			if err != nil {
				return err
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.ListDeadLetters(ctx, &dlqadminpb.ListDeadLettersRequest{Filter: f})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tFAILED\tCLASS\tCODE\tPRODUCER\tROUTE\tATTEMPTS\tSIZE\tREASON")
			for _, e := range resp.GetDeadLetters() {
				reason := dlqOneLine(e.GetReason())
				if e.GetRequeuedAs() != "" {
					reason = fmt.Sprintf("%s [requeued as %s]", reason, e.GetRequeuedAs())
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", e.GetId(), e.GetFailedAt().AsTime().UTC().Format(time.RFC3339),
					e.GetErrorClass(), e.GetErrorCode(), dash(e.GetProducerId()), dash(e.GetRoute()), dlqAttemptCount(e),
					e.GetPayloadSize(), dash(reason))
			}
			return tw.Flush()
		},
	}
	lf.register(list)
	list.Flags().BoolVar(&lf.all, "all", false, "include dead letters that were already requeued")
	return list
}

// newDLQShowCmd builds `sw4rm dlq show`.
func newDLQShowCmd(client dlqAdminDialer) *cobra.Command {
	return &cobra.Command{
		Use:   "show <id>",
		Short: "Show one dead letter: its diagnostic context and the attempt history of its operation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := dlqParseIDs(args)
			if err != nil {
				return err
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: ids[0]})
			if err != nil {
				return err
			}
			return dlqShow(cmd.OutOrStdout(), resp.GetDeadLetter())
		},
	}
}

// dlqTime formats the times of `sw4rm dlq show` to the millisecond: attempts a sweep apart
// fall within one second.
const dlqTime = "2006-01-02T15:04:05.000Z07:00"

// dlqShow prints a dead letter: its fields, then its attempt history numbered by each
// attempt's place in the operation, with a line where a bounded history left attempts out.
func dlqShow(w io.Writer, e *dlqadminpb.DeadLetter) error {
	when := func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return "-"
		}
		return ts.AsTime().UTC().Format(dlqTime)
	}
	requeued := "-"
	if e.GetRequeuedAt() != nil {
		requeued = when(e.GetRequeuedAt()) + " as " + e.GetRequeuedAs()
	}
	excerpt := "-"
	if x := e.GetPayloadExcerpt(); len(x) > 0 && utf8.Valid(x) {
		excerpt = dlqOneLine(string(x))
	} else if len(x) > 0 {
		excerpt = fmt.Sprintf("(%d bytes, not text; sw4rm dlq export --id %d has them)", len(x), e.GetId())
	}
	total := dlqAttemptCount(e)
	attempts := fmt.Sprint(total)
	if n := e.GetAttemptsDropped(); n > 0 {
		attempts = fmt.Sprintf("%d (%d shown: the first %d and the last %d)", total, len(e.GetAttempts()),
			min(store.DLQAttemptsHead, len(e.GetAttempts())), len(e.GetAttempts())-min(store.DLQAttemptsHead, len(e.GetAttempts())))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range [][2]string{
		{"ID", fmt.Sprint(e.GetId())},
		{"MESSAGE", e.GetMessageId()},
		{"CLASS", e.GetErrorClass()},
		{"CODE", dash(e.GetErrorCode())},
		{"REASON", dash(dlqOneLine(e.GetReason()))},
		{"PRODUCER", dash(e.GetProducerId())},
		{"ROUTE", dash(e.GetRoute())},
		{"CORRELATION", dash(e.GetCorrelationId())},
		{"TOKEN", dash(e.GetIdempotencyToken())},
		{"FIRST SEEN", when(e.GetFirstSeenAt())},
		{"FAILED", when(e.GetFailedAt())},
		{"REQUEUED", requeued},
		{"PAYLOAD", fmt.Sprintf("%d bytes, %s", e.GetPayloadSize(), dash(e.GetContentType()))},
		{"EXCERPT", excerpt},
		{"ATTEMPTS", attempts},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tAT\tSTATE\tCODE\tSINCE\tMESSAGE\tREASON")
	dropped := int(e.GetAttemptsDropped())
	for i, a := range e.GetAttempts() {
		n := i + 1
		if dropped > 0 && i >= store.DLQAttemptsHead {
			if i == store.DLQAttemptsHead {
				fmt.Fprintf(tw, "…\t(%d attempts not kept)\t\t\t\t\t\n", dropped)
			}
			n += dropped
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n, when(a.GetAt()), dash(a.GetState()), dash(a.GetErrorCode()),
			when(a.GetUpdatedAt()), a.GetMessageId(), dash(dlqOneLine(a.GetReason())))
	}
	return tw.Flush()
}

// dlqAttemptCount is how many attempts an entry's operation had, those its bounded history
// left out included.
func dlqAttemptCount(e *dlqadminpb.DeadLetter) int {
	return len(e.GetAttempts()) + int(e.GetAttemptsDropped())
}

// newDLQRequeueCmd builds `sw4rm dlq requeue`.
func newDLQRequeueCmd(client dlqAdminDialer) *cobra.Command {
	requeue := &cobra.Command{
		Use:   "requeue <id>...",
		Short: "Requeue dead letters as new attempts (each at most once)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := dlqParseIDs(args)
			if err != nil {
				return err
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: ids})
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range resp.GetResults() {
				if r.GetCode() != "" {
					failed++
					fmt.Fprintf(cmd.OutOrStdout(), "%d: %s: %s\n", r.GetId(), r.GetCode(), r.GetError())
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d: requeued as %s\n", r.GetId(), r.GetMessageId())
			}
			if failed > 0 {
				cmd.SilenceUsage = true
				return fmt.Errorf("%d of %d requeues failed", failed, len(resp.GetResults()))
			}
			return nil
		},
	}
	return requeue
}

// newDLQExportCmd builds `sw4rm dlq export`.
func newDLQExportCmd(client dlqAdminDialer) *cobra.Command {
	var ef dlqFilterFlags
	var ids []int64
	var outFile string
	export := &cobra.Command{
		Use:   "export [filters] [--id N ...] [-o file]",
		Short: "Export a JSON diagnostic bundle: entries, attempt history, payload excerpts, audit events",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ef.filter(time.Now())
			if err != nil {
				return err
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.Export(ctx, &dlqadminpb.ExportRequest{Filter: f, Ids: ids})
			if err != nil {
				return err
			}
			if outFile == "" || outFile == "-" {
				_, err := cmd.OutOrStdout().Write(resp.GetBundle())
				return err
			}
			// Bundles hold routing context and payload excerpts: readable by the operator only.
			if err := os.WriteFile(outFile, resp.GetBundle(), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d dead letters to %s\n", resp.GetCount(), outFile)
			return nil
		},
	}
	ef.register(export)
	export.Flags().BoolVar(&ef.all, "all", false, "include dead letters that were already requeued")
	export.Flags().Int64SliceVar(&ids, "id", nil, "export exactly these dead letters (repeatable or comma-separated; not with filters)")
	export.Flags().StringVarP(&outFile, "output", "o", "", "write the bundle to this file (default stdout)")
	return export
}

// dlqFilterFlags are the filters of §21.1 shared by list and export.
type dlqFilterFlags struct {
	since, until, class, code, route, producer string
	all                                        bool
	limit                                      uint32
}

func (f *dlqFilterFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.since, "since", "", "failed at or after: RFC3339 time, or a duration ago (30m, 1h, 7d)")
	cmd.Flags().StringVar(&f.until, "until", "", "failed before: RFC3339 time, or a duration ago")
	cmd.Flags().StringVar(&f.class, "class", "", "error class: retries_exhausted, terminal_error, policy_violation or ttl_expired")
	cmd.Flags().StringVar(&f.code, "error-code", "", "final error code, e.g. ACK_TIMEOUT or TTL_EXPIRED")
	cmd.Flags().StringVar(&f.route, "route", "", "only messages routed to this agent")
	cmd.Flags().StringVar(&f.producer, "producer", "", "only messages sent by this agent")
	cmd.Flags().Uint32Var(&f.limit, "limit", 0, "at most this many, the newest kept (0 = server default, 1000)")
}

// filter builds the request filter; relative times count back from now.
func (f *dlqFilterFlags) filter(now time.Time) (*dlqadminpb.DeadLetterFilter, error) {
	out := &dlqadminpb.DeadLetterFilter{
		ErrorClass: f.class, ErrorCode: strings.ToUpper(f.code), Route: agentIDs.bare(f.route), Producer: agentIDs.bare(f.producer),
		IncludeRequeued: f.all, Limit: f.limit,
	}
	for _, x := range []struct {
		name, value string
		dst         **timestamppb.Timestamp
	}{{"since", f.since, &out.Since}, {"until", f.until, &out.Until}} {
		if x.value == "" {
			continue
		}
		t, err := dlqParseWhen(x.value, now)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", x.name, err)
		}
		*x.dst = timestamppb.New(t)
	}
	return out, nil
}

// dlqParseWhen reads an RFC3339 time or a duration ago ("90m", "1h", "7d").
func dlqParseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is neither an RFC3339 time nor a duration like 1h or 7d", s)
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return time.Time{}, fmt.Errorf("%q is neither an RFC3339 time nor a duration like 1h or 7d", s)
		}
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("%q: a duration ago must not be negative", s)
	}
	return now.Add(-d), nil
}

// dlqParseIDs reads dead letter ids.
func dlqParseIDs(args []string) ([]int64, error) {
	var out []int64
	for _, a := range args {
		id, err := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
		if err != nil || id <= 0 {
			return nil, errors.New("dead letter ids are positive integers (sw4rm dlq list shows them), got " + strconv.Quote(a))
		}
		out = append(out, id)
	}
	return out, nil
}

// dlqOneLine keeps a table cell on one line.
func dlqOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
