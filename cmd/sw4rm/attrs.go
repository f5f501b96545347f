package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"
	"go.temporal.io/api/enums/v1"

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
			for _, f := range searchAttributeFlags() {
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), f); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// searchAttributeFlags returns "--search-attribute" "Name=Type" pairs, sorted by name.
func searchAttributeFlags() []string {
	attrs := workflows.SearchAttributes()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		typ := "Keyword"
		if attrs[name] == enums.INDEXED_VALUE_TYPE_BOOL {
			typ = "Bool"
		}
		out = append(out, "--search-attribute", name+"="+typ)
	}
	return out
}
