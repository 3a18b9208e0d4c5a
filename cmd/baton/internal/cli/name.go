package cli

import (
	"fmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/spf13/cobra"
)

func (a *app) nameCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "name KEY",
		Short: "Print the lock name for any key, for a lock per entity",
		Long: `Print a valid lock name for KEY, which can be anything: an order ID, an
e-mail address, a URL, a path, a name in any script, of any length. It is
baton.NameFor(KEY) of the Go library, so a script and a Go program that
lock one entity name the same lock: a readable part (KEY's letters,
lower-cased, and digits, other characters as '-', at most 32 characters)
and 26 characters of KEY's SHA-256, so that different keys never share a
lock. Mapping keys by hand (lower-casing, replacing characters, cutting at
253) makes different keys share one lock. Keys are compared byte for
byte: normalize the case first if "Ann" and "ann" are one entity.

Put "--" before a KEY that begins with '-'. Add a prefix to keep kinds of
entity apart: --name "orders.$(baton name -- "$id")".`,
		Example: `  baton lock --name "files.$(baton name -- "$path")" -- ./import "$path"
  baton name "Ann.Lee@Example.com"   # ann-lee-example-com-rhn7grkoowojq7f5q7qtljjxwu`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("name takes exactly one KEY, got %d arguments: %q (quote a KEY with spaces)", len(args), args)
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), baton.NameFor(args[0]))
			return err
		}),
	}
}

// checkName validates a lock name given as what (--name, NAME): the error
// of one made from data says how to make a valid one from any key.
func checkName(what, name string) error {
	err := backend.ValidateName(name)
	if err == nil {
		return nil
	}
	if name == "" {
		return usageErrorf("%s: %w", what, err)
	}
	return usageErrorf("%s: %w; for a lock per key (an ID, an e-mail address, a path), \"baton name KEY\" prints a valid name for any key", what, err)
}
