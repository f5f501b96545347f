package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/auditadminpb"
)

// auditOrders maps `sw4rm audit --order` to the service's orders.
var auditOrders = map[string]auditadminpb.AuditOrder{
	"hlc":  auditadminpb.AuditOrder_AUDIT_ORDER_HLC,
	"time": auditadminpb.AuditOrder_AUDIT_ORDER_TIME,
	"id":   auditadminpb.AuditOrder_AUDIT_ORDER_UNSPECIFIED,
}

// auditFlags are the filters and the order of `sw4rm audit`.
type auditFlags struct {
	correlation, agent, typePrefix, message, since, until, order string
	limit                                                        uint32
	json                                                         bool
}

// request builds the ListAuditEvents request; relative times count back from now.
func (f *auditFlags) request(now time.Time) (*auditadminpb.ListAuditEventsRequest, error) {
	order, ok := auditOrders[strings.ToLower(f.order)]
	if !ok {
		return nil, fmt.Errorf("--order %q: want hlc, time or id", f.order)
	}
	req := &auditadminpb.ListAuditEventsRequest{CorrelationId: f.correlation, AgentId: agentIDs.bare(f.agent),
		TypePrefix: f.typePrefix, MessageId: f.message, Order: order, Limit: f.limit}
	for _, x := range []struct {
		name, value string
		dst         **timestamppb.Timestamp
	}{{"since", f.since, &req.Since}, {"until", f.until, &req.Until}} {
		if x.value == "" {
			continue
		}
		t, err := dlqParseWhen(x.value, now)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", x.name, err)
		}
		*x.dst = timestamppb.New(t)
	}
	return req, nil
}

// newAuditCmd builds `sw4rm audit`: a thin client of the AuditAdminService extension (§19),
// authenticated with an operator token, that lists audit events filtered and ordered by HLC
// (§4: a correlation's causal order, even when the hosts' clocks disagree), time or id.
func newAuditCmd() *cobra.Command {
	var (
		of operatorFlags
		af auditFlags
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List audit events (§19), filtered, in causal (HLC), time or row order",
		Long: "List audit events (§19) through the AuditAdminService, as an operator.\n\n" +
			"--order hlc (the default) sorts by the Hybrid Logical Clock reading each event was recorded with\n" +
			"(§4): the causal order of a correlation's events, even when the processes that recorded them\n" +
			"have clocks that disagree. --order time sorts by wall-clock time, --order id by row.\n" +
			"The HLC is advisory (§24): nothing in the protocol's decisions depends on it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := af.request(time.Now())
			if err != nil {
				return err
			}
			conn, ctx, err := of.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			resp, err := auditadminpb.NewAuditAdminServiceClient(conn).ListAuditEvents(ctx, req)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if af.json {
				for _, e := range resp.GetEvents() {
					b, err := protojson.Marshal(e)
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HLC\tTIME\tTYPE\tACTOR\tAGENT\tMESSAGE\tCORRELATION\tTRACE\tDETAILS")
			for _, e := range resp.GetEvents() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(e.GetHlc()), e.GetTime().AsTime().UTC().Format(dlqTime),
					e.GetType(), dash(e.GetActor()), dash(e.GetAgentId()), dash(e.GetMessageId()), dash(e.GetCorrelationId()),
					dash(e.GetTraceId()), dlqOneLine(e.GetDetailsJson()))
			}
			return tw.Flush()
		},
	}
	of.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&af.correlation, "correlation", "", "only events of this correlation_id")
	fl.StringVar(&af.agent, "agent", "", "only events concerning this agent")
	fl.StringVar(&af.typePrefix, "type", "", `only events whose type starts with this, e.g. "message." or "dag.node"`)
	fl.StringVar(&af.message, "message", "", "only events concerning this message_id")
	fl.StringVar(&af.since, "since", "", "recorded at or after: RFC3339 time, or a duration ago (30m, 1h, 7d)")
	fl.StringVar(&af.until, "until", "", "recorded before: RFC3339 time, or a duration ago")
	fl.StringVar(&af.order, "order", "hlc", "hlc (causal), time (wall clock) or id (as written)")
	fl.Uint32Var(&af.limit, "limit", 0, "at most this many, the newest kept (0 = server default, 1000)")
	fl.BoolVar(&af.json, "json", false, "one JSON object per event instead of a table")
	return cmd
}
