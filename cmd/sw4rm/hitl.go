package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/hitlsignals"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
)

// newHitlCmd builds `sw4rm hitl list|decide|history`: thin clients of the HitlAdminService
// extension, authenticated with an operator token.
func newHitlCmd() *cobra.Command {
	var of operatorFlags
	cmd := &cobra.Command{
		Use:   "hitl",
		Short: "See and decide human-in-the-loop invocations (§15)",
	}
	of.register(cmd)

	client := func(cmd *cobra.Command) (hitladminpb.HitlAdminServiceClient, context.Context, func(), error) {
		conn, ctx, err := of.dial(cmd)
		if err != nil {
			return nil, nil, nil, err
		}
		return hitladminpb.NewHitlAdminServiceClient(conn), ctx, func() { _ = conn.Close() }, nil
	}

	var all bool
	var reason string
	list := &cobra.Command{
		Use:   "list",
		Short: "List pending invocations: reason, subject, age, deadline",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.ListInvocations(ctx, &hitladminpb.ListInvocationsRequest{IncludeDecided: all, ReasonType: strings.ToUpper(reason)})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INVOCATION\tREASON\tSUBJECT\tPRIORITY\tAGE\tDEADLINE\tSTATUS")
			now := time.Now()
			for _, inv := range resp.GetInvocations() {
				st := inv.GetStatus()
				if st == "decided" {
					var o hitlsignals.Outcome
					if json.Unmarshal([]byte(inv.GetOutcomeJson()), &o) == nil {
						st = fmt.Sprintf("%s by %s", o.Decision, o.DecidedBy)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", inv.GetInvocationId(), inv.GetReasonType(), dash(inv.GetSubject()), inv.GetPriority(),
					now.Sub(inv.GetCreatedAt().AsTime()).Truncate(time.Second), until(now, inv.GetDeadline().AsTime()), st)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&all, "all", false, "include decided invocations")
	list.Flags().StringVar(&reason, "reason", "", "only this reason type, e.g. CONFLICT")

	var rationale, patchFile string
	decide := &cobra.Command{
		Use:   "decide <invocation-id> approve|deny|modify|defer --rationale \"...\"",
		Short: "Decide a pending invocation",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var patch []byte
			if patchFile != "" {
				b, err := os.ReadFile(patchFile)
				if err != nil {
					return fmt.Errorf("read patch: %w", err)
				}
				patch = b
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.Decide(ctx, &hitladminpb.DecideRequest{InvocationId: args[0], Decision: args[1], Rationale: rationale, Patch: patch})
			if err != nil {
				return err
			}
			var o hitlsignals.Outcome
			_ = json.Unmarshal([]byte(resp.GetOutcomeJson()), &o)
			note := ""
			if resp.GetAlreadyDecided() {
				note = " (already applied)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s by %s at %s%s\n", args[0], o.Decision, o.DecidedBy, o.DecidedAt.UTC().Format(time.RFC3339), note)
			return nil
		},
	}
	decide.Flags().StringVar(&rationale, "rationale", "", "why (required)")
	decide.Flags().StringVar(&patchFile, "patch-file", "", "the modification, for modify")

	history := &cobra.Command{
		Use:   "history [invocation-id]",
		Short: "Show the audit trail: who, when, what, why",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			req := &hitladminpb.HistoryRequest{}
			if len(args) == 1 {
				req.InvocationId = args[0]
			}
			resp, err := c.History(ctx, req)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tINVOCATION\tEVENT\tACTOR\tDETAILS")
			for _, e := range resp.GetEvents() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.GetTime().AsTime().UTC().Format(time.RFC3339), e.GetInvocationId(), e.GetType(), e.GetActor(), e.GetDetailsJson())
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(list, decide, history)
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func until(now, t time.Time) string {
	if t.Before(now) {
		return "passed"
	}
	return "in " + t.Sub(now).Truncate(time.Second).String()
}
