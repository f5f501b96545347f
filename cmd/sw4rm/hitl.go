package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
)

// newHitlCmd builds `sw4rm hitl list|decide|history`, thin clients of the HitlAdminService
// extension authenticated with an operator token, and `sw4rm hitl sign`, which signs a
// decision for the raw signal door without any server.
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

	cmd.AddCommand(newHitlListCmd(client), newHitlDecideCmd(client), newHitlHistoryCmd(client), newHitlSignCmd(), newHitlOperatorKeyCmd())
	return cmd
}

// hitlAdminDialer dials HitlAdminService for one command; the returned func closes the connection.
type hitlAdminDialer = func(*cobra.Command) (hitladminpb.HitlAdminServiceClient, context.Context, func(), error)

// newHitlListCmd builds `sw4rm hitl list`.
func newHitlListCmd(client hitlAdminDialer) *cobra.Command {
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
					var o hitl.Outcome
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
	return list
}

// newHitlDecideCmd builds `sw4rm hitl decide`.
func newHitlDecideCmd(client hitlAdminDialer) *cobra.Command {
	var rationale, patchFile string
	decide := &cobra.Command{
		Use:   "decide <invocation-id>|hitl/<invocation-id> approve|deny|modify|defer --rationale \"...\"",
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
			// hitl/<invocation_id>, as the Temporal UI shows the wait, names it too.
			id := hitlIDs.bare(args[0])
			resp, err := c.Decide(ctx, &hitladminpb.DecideRequest{InvocationId: id, Decision: args[1], Rationale: rationale, Patch: patch})
			if err != nil {
				return err
			}
			var o hitl.Outcome
			_ = json.Unmarshal([]byte(resp.GetOutcomeJson()), &o)
			note := ""
			if resp.GetAlreadyDecided() {
				note = " (already applied)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s by %s at %s%s\n", id, o.Decision, o.DecidedBy, o.DecidedAt.UTC().Format(time.RFC3339), note)
			return nil
		},
	}
	decide.Flags().StringVar(&rationale, "rationale", "", "why (required)")
	decide.Flags().StringVar(&patchFile, "patch-file", "", "the modification, for modify")
	return decide
}

// newHitlHistoryCmd builds `sw4rm hitl history`.
func newHitlHistoryCmd(client hitlAdminDialer) *cobra.Command {
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
				req.InvocationId = hitlIDs.bare(args[0])
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
	return history
}

// newHitlSignCmd builds `sw4rm hitl sign`: the raw signal door's half that needs a key. It
// signs a decision with the operator's own Ed25519 key and prints it as the JSON input of
// `temporal workflow signal`; the workflow accepts it when the key is one of the operator's
// (SW4RM_HITL_OPERATOR_KEYS) and it has not expired. It needs no server: the operator may
// sign on a machine that only reaches Temporal.
func newHitlSignCmd() *cobra.Command {
	var keyFile, operator, invocation, decision, rationale, patchFile string
	var ttl time.Duration
	sign := &cobra.Command{
		Use:   "sign --key FILE --operator NAME --invocation ID --decision approve|deny|modify|defer --rationale \"...\"",
		Short: "Sign a decision with your own key, for a plain `temporal workflow signal`",
		Long: "Sign a decision with your own Ed25519 key (the file holds its 32-byte seed in hex, or base64, or PKCS#8 PEM)\n" +
			"and print the decision JSON. Send it with the command printed on stderr. The signature expires after --ttl\n" +
			"and names this invocation and this decision only: what stays in the workflow's history can decide nothing else.\n" +
			"The key's public half must be configured for you on the workers: see `sw4rm hitl operator-key`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || operator == "" || invocation == "" {
				return fmt.Errorf("--key, --operator (or SW4RM_OPERATOR) and --invocation are required")
			}
			if ttl <= 0 || ttl > hitl.MaxAttestationTTL {
				return fmt.Errorf("--ttl %s: want a positive duration of at most %s", ttl, hitl.MaxAttestationTTL)
			}
			action, err := hitl.ParseAction(decision)
			if err != nil {
				return err
			}
			var patch []byte
			if patchFile != "" {
				if patch, err = os.ReadFile(patchFile); err != nil {
					return fmt.Errorf("read patch: %w", err)
				}
			}
			invocation = hitlIDs.bare(invocation)
			d := hitl.Decision{InvocationID: invocation, Decision: action, Rationale: rationale, Patch: patch, Operator: operator, Via: "signal"}
			if err := d.Check(); err != nil {
				return err
			}
			key, err := auth.LoadPrivateKey(keyFile)
			if err != nil {
				return err
			}
			signed, err := hitl.Attest(d, key, time.Now().Add(ttl))
			if err != nil {
				return err
			}
			b, err := json.Marshal(signed)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			fmt.Fprintf(cmd.ErrOrStderr(), "# valid until %s; send it with:\n# temporal workflow signal --workflow-id %s --name %s --input '<the JSON above>'\n",
				time.UnixMilli(signed.Attestation.ExpiresAt).UTC().Format(time.RFC3339), hitl.WorkflowID(invocation), hitl.DecisionSignal)
			return nil
		},
	}
	f := sign.Flags()
	f.StringVar(&keyFile, "key", os.Getenv("SW4RM_OPERATOR_KEY_FILE"), "file holding your Ed25519 private key (SW4RM_OPERATOR_KEY_FILE)")
	f.StringVar(&operator, "operator", os.Getenv("SW4RM_OPERATOR"), "your operator name (SW4RM_OPERATOR)")
	f.StringVar(&invocation, "invocation", "", "the invocation id")
	f.StringVar(&decision, "decision", "", "approve, deny, modify or defer")
	f.StringVar(&rationale, "rationale", "", "why (required)")
	f.StringVar(&patchFile, "patch-file", "", "the modification, for modify")
	f.DurationVar(&ttl, "ttl", hitl.DefaultAttestationTTL, "how long the signed decision stays valid")
	return sign
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

// newHitlOperatorKeyCmd builds `sw4rm hitl operator-key`: it prints the entry of
// SW4RM_HITL_OPERATOR_KEYS that lets the workers check decisions signed with a key file —
// only the public half, which the operator hands to whoever configures the deployment.
func newHitlOperatorKeyCmd() *cobra.Command {
	var keyFile, operator string
	c := &cobra.Command{
		Use:   "operator-key --key FILE --operator NAME",
		Short: "Print your SW4RM_HITL_OPERATOR_KEYS entry (name=<base64 public key>) for a key file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || operator == "" {
				return fmt.Errorf("--key and --operator (or SW4RM_OPERATOR) are required")
			}
			key, err := auth.LoadPrivateKey(keyFile)
			if err != nil {
				return err
			}
			pub, _ := key.Public().(ed25519.PublicKey)
			fmt.Fprintf(cmd.OutOrStdout(), "%s=%s\n", operator, base64.StdEncoding.EncodeToString(pub))
			fmt.Fprintf(cmd.ErrOrStderr(), "# key id %s\n", auth.KeyID(auth.AlgorithmEd25519, pub))
			return nil
		},
	}
	c.Flags().StringVar(&keyFile, "key", os.Getenv("SW4RM_OPERATOR_KEY_FILE"), "file holding your Ed25519 private key (SW4RM_OPERATOR_KEY_FILE)")
	c.Flags().StringVar(&operator, "operator", os.Getenv("SW4RM_OPERATOR"), "your operator name (SW4RM_OPERATOR)")
	return c
}
