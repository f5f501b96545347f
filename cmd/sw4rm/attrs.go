package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// newSearchAttributesCmd prints SW4RM's custom search attributes as the Temporal CLI's
// --search-attribute flags, so that `make dev` and the tests register exactly what
// workflows.SearchAttributes lists instead of a copy of it.
func newSearchAttributesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "search-attributes",
		Short: "Print SW4RM's search attributes as `temporal server start-dev` flags",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range workflows.SearchAttributeFlags() {
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), f); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
