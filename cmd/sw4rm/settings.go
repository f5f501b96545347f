package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// The settings table in README.md sits between these markers; `sw4rm settings --readme
// README.md` rewrites what is between them from app's settings table, and
// TestREADMESettingsTable fails when it differs.
const (
	settingsBegin = "<!-- BEGIN settings: generated from app/settings.go by `go run ./cmd/sw4rm settings --readme README.md`; do not edit by hand -->"
	settingsEnd   = "<!-- END settings -->"
)

// newSettingsCmd lists every process setting. It is hidden: it serves README.md's generator.
func newSettingsCmd() *cobra.Command {
	var (
		markdown bool
		names    bool
		readme   string
	)
	cmd := &cobra.Command{
		Use:    "settings",
		Short:  "List every setting of sw4rm server, worker and dev: variable, flag and default",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case readme != "":
				return rewriteSettingsSection(readme)
			case markdown:
				fmt.Fprint(cmd.OutOrStdout(), app.SettingsMarkdown())
				return nil
			case names:
				for _, s := range app.Settings() {
					fmt.Fprintln(cmd.OutOrStdout(), s.Env)
				}
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			defaults := app.NewFlags().FlagSet()
			for _, s := range app.Settings() {
				fmt.Fprintf(w, "%s\t--%s\t%s\n", s.Env, s.Flag, defaults.Lookup(s.Flag).DefValue)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the table of README.md's Configuration section")
	cmd.Flags().BoolVar(&names, "names", false, "print only the variables, one a line (what deploy/check reads)")
	cmd.Flags().StringVar(&readme, "readme", "", "rewrite the settings table of this README.md in place")
	return cmd
}

// rewriteSettingsSection rewrites the settings table of the README at path.
func rewriteSettingsSection(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := withSettingsTable(string(old))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(updated), 0o644)
}

// withSettingsTable returns readme with the table between its settings markers generated
// afresh.
func withSettingsTable(readme string) (string, error) {
	before, rest, ok := strings.Cut(readme, settingsBegin+"\n")
	_, after, ok2 := strings.Cut(rest, settingsEnd)
	if !ok || !ok2 {
		return "", errors.New("no settings markers (" + settingsBegin + " … " + settingsEnd + ")")
	}
	return before + settingsBegin + "\n" + app.SettingsMarkdown() + settingsEnd + after, nil
}
