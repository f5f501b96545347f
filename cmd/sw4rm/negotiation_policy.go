package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
)

// newNegotiationCmd builds `sw4rm negotiation policy get|set|profiles`: thin clients of
// SchedulerPolicyService's policy RPCs (§17.2, docs/negotiation-policy.md). Policies are JSON
// in the protojson form of policy.proto (field names as in the .proto, unknown fields
// refused), so what get and profiles print, set and profiles set read back. Setting needs an
// operator token when authentication is on. It is a flat list of four short subcommands
// sharing one dialer, kept together because each is a few lines over the same flags.
func newNegotiationCmd() *cobra.Command {
	var of operatorFlags
	cmd := &cobra.Command{
		Use:   "negotiation",
		Short: "Negotiation settings of the scheduler (§17)",
	}
	policy := &cobra.Command{
		Use:   "policy",
		Short: "Show or set the base negotiation policy and the policy profiles (§17.2)",
	}
	// client runs one call with a connection and the operator's context.
	client := func(cmd *cobra.Command, run func(context.Context, schedulerpb.SchedulerPolicyServiceClient) error) error {
		conn, ctx, err := of.dial(cmd)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		return run(ctx, schedulerpb.NewSchedulerPolicyServiceClient(conn))
	}

	get := &cobra.Command{
		Use:   "get",
		Short: "Print the base negotiation policy as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(cmd, func(ctx context.Context, c schedulerpb.SchedulerPolicyServiceClient) error {
				resp, err := c.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
				if err != nil {
					return err
				}
				if resp.GetPolicy() == nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "no base policy is set: negotiations start from their intensity's defaults")
					return nil
				}
				return printJSON(cmd, resp.GetPolicy())
			})
		},
	}

	set := &cobra.Command{
		Use:   "set <policy.json|->",
		Short: "Replace the base negotiation policy with the one in a JSON file (- reads stdin)",
		Long: "Replace the base negotiation policy with a NegotiationPolicy in JSON, e.g.\n" +
			`  {"max_rounds": 6, "score_threshold": 0.8, "hitl": {"mode": "PauseOnFinalAccept"}}` + "\n" +
			"Fields left out are unset (the intensity's defaults apply). The server refuses values outside §17.2's ranges and says why.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := &policypb.NegotiationPolicy{}
			if err := readJSON(cmd, args[0], p); err != nil {
				return err
			}
			return client(cmd, func(ctx context.Context, c schedulerpb.SchedulerPolicyServiceClient) error {
				resp, err := c.SetNegotiationPolicy(ctx, &schedulerpb.SetNegotiationPolicyRequest{Policy: p})
				if err != nil {
					return err
				}
				if !resp.GetOk() {
					return fmt.Errorf("refused: %s", resp.GetReason())
				}
				fmt.Fprintln(cmd.OutOrStdout(), "base negotiation policy set")
				return nil
			})
		},
	}

	profiles := &cobra.Command{
		Use:   "profiles",
		Short: "Print the policy profiles as JSON, {\"profiles\": [...]}",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(cmd, func(ctx context.Context, c schedulerpb.SchedulerPolicyServiceClient) error {
				resp, err := c.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
				if err != nil {
					return err
				}
				return printJSON(cmd, resp)
			})
		},
	}
	setProfiles := &cobra.Command{
		Use:   "set <profiles.json|->",
		Short: "Replace every policy profile with those in a JSON file (- reads stdin)",
		Long: "Replace every policy profile at once with the profiles in a JSON file: either what `profiles` prints,\n" +
			`  {"profiles": [{"name": "fast", "policy": {"max_rounds": 2}}]}` + "\n" +
			"or the bare array. Profiles not in the file are removed; an empty list removes them all.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &schedulerpb.SetPolicyProfilesRequest{}
			if err := readJSON(cmd, args[0], req); err != nil {
				return err
			}
			return client(cmd, func(ctx context.Context, c schedulerpb.SchedulerPolicyServiceClient) error {
				resp, err := c.SetPolicyProfiles(ctx, req)
				if err != nil {
					return err
				}
				if !resp.GetOk() {
					return fmt.Errorf("refused: %s", resp.GetReason())
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d policy profile(s) set\n", len(req.GetProfiles()))
				return nil
			})
		},
	}
	profiles.AddCommand(setProfiles)

	policy.AddCommand(get, set, profiles)
	of.register(cmd)
	cmd.AddCommand(policy)
	return cmd
}

// printJSON prints m as protojson with the .proto field names, indented by encoding/json:
// protojson varies its whitespace on purpose, and the output should stay the same for
// diffs and scripts.
func printJSON(cmd *cobra.Command, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return err
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), out.String())
	return err
}

// readJSON reads a protojson message from a file, or stdin for "-". A bare JSON array is
// read as the message's one repeated field ({"profiles": [...]} for profiles).
func readJSON(cmd *cobra.Command, path string, m proto.Message) error {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		if _, ok := m.(*schedulerpb.SetPolicyProfilesRequest); !ok {
			return errors.New(path + ": want a JSON object, not an array")
		}
		b = append(append([]byte(`{"profiles":`), t...), '}')
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
