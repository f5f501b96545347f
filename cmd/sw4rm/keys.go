package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
)

// newKeysCmd builds `sw4rm keys list|revoke|generate`: list and revoke are thin clients of the
// KeyAdminService extension (§23), authenticated with an operator token; generate makes an
// agent's Ed25519 key pair (§6.2) locally.
func newKeysCmd() *cobra.Command {
	var of operatorFlags
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List and revoke agents' keys, or generate one (§6.2, §23)",
	}

	client := func(cmd *cobra.Command) (keyadminpb.KeyAdminServiceClient, context.Context, func(), error) {
		conn, ctx, err := of.dial(cmd)
		if err != nil {
			return nil, nil, nil, err
		}
		return keyadminpb.NewKeyAdminServiceClient(conn), ctx, func() { _ = conn.Close() }, nil
	}

	var agent string
	list := &cobra.Command{
		Use:   "list [--agent ID]",
		Short: "List agents' keys: agent, key id, when added, until when, status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.ListKeys(ctx, &keyadminpb.ListKeysRequest{AgentId: agentIDs.bare(agent)})
			if err != nil {
				return err
			}
			return printKeys(cmd, resp.GetKeys())
		},
	}
	of.register(list)
	list.Flags().StringVar(&agent, "agent", "", "only this agent's keys")

	var keyID, reason string
	revoke := &cobra.Command{
		Use:   "revoke <agent-id> [--key KEY_ID] --reason \"...\"",
		Short: "Revoke one key of an agent, or all of its keys; frontends refuse them within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return errors.New("--reason is required: it is kept with the key and audited")
			}
			c, ctx, done, err := client(cmd)
			if err != nil {
				return err
			}
			defer done()
			agentID := agentIDs.bare(args[0]) // agent/<agent_id>, as the Temporal UI shows it, works too
			resp, err := c.RevokeKey(ctx, &keyadminpb.RevokeKeyRequest{AgentId: agentID, KeyId: keyID, Reason: reason})
			if err != nil {
				return err
			}
			what := "every key of " + agentID
			if keyID != "" {
				what = "key " + keyID + " of " + agentID
			}
			if resp.GetRevoked() == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: already revoked, nothing changed\n", what)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d key(s) revoked\n", what, resp.GetRevoked())
			}
			return printKeys(cmd, resp.GetKeys())
		},
	}
	of.register(revoke)
	revoke.Flags().StringVar(&keyID, "key", "", "the key id to revoke (sw4rm keys list shows them); empty revokes all of the agent's keys")
	revoke.Flags().StringVar(&reason, "reason", "", "why (required; recorded and audited)")

	var out string
	generate := &cobra.Command{
		Use:   "generate [--out FILE]",
		Short: "Generate an agent's Ed25519 key: the private key to a file, the public key and key id to stdout",
		Long: "Generates an Ed25519 key pair for an agent (§6.2). The private key is written as its 32-byte seed in hex on one\n" +
			"line: to --out, created with mode 0600 and never overwritten, or without --out to stdout (then the public key and\n" +
			"key id go to stderr). The agent registers the public key (AgentDescriptor.public_key) and signs with the seed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			seed := hex.EncodeToString(priv.Seed()) + "\n"
			info := cmd.OutOrStdout()
			if out == "" {
				fmt.Fprint(cmd.OutOrStdout(), seed)
				info = cmd.ErrOrStderr()
			} else if err := writeNewFile(out, []byte(seed)); err != nil {
				return err
			}
			fmt.Fprintf(info, "public_key: %s\nkey_id: %s\n", base64.StdEncoding.EncodeToString(pub), auth.KeyID(auth.AlgorithmEd25519, pub))
			return nil
		},
	}
	generate.Flags().StringVarP(&out, "out", "o", "", "file for the private key (mode 0600; must not exist)")

	cmd.AddCommand(list, revoke, generate)
	return cmd
}

// writeNewFile creates path with mode 0600 and writes b; an existing file is left alone.
func writeNewFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; a key file is never overwritten (remove it first, or choose another --out)", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// printKeys lists keys as a table.
func printKeys(cmd *cobra.Command, keys []*keyadminpb.AgentKey) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tKEY\tADDED\tNOT AFTER\tSTATUS")
	for _, k := range keys {
		notAfter := "-"
		if k.GetNotAfter() != nil {
			notAfter = k.GetNotAfter().AsTime().UTC().Format(time.RFC3339)
		}
		st := "valid"
		switch {
		case k.GetRevokedAt() != nil:
			st = fmt.Sprintf("revoked %s by %s: %s", k.GetRevokedAt().AsTime().UTC().Format(time.RFC3339), dash(k.GetRevokedBy()), dlqOneLine(k.GetRevokeReason()))
		case !k.GetValid():
			st = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.GetAgentId(), k.GetKeyId(), k.GetAddedAt().AsTime().UTC().Format(time.RFC3339), notAfter, st)
	}
	return tw.Flush()
}
