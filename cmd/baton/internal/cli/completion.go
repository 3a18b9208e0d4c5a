package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// registerCompletions makes shell completion (baton completion bash|zsh|
// fish|powershell) offer the values of the flags that take one of a fixed
// set, on root's persistent flags and every subcommand's flags.
func registerCompletions(root *cobra.Command) {
	flagValues := map[string][]string{
		"backend":    backends,
		"output":     {"wide", "json", "yaml"},
		"log-level":  {"debug", "info", "warn", "error"},
		"log-format": {"text", "json"},
	}
	register := func(cmd *cobra.Command, name string, values []string) {
		if cmd.Flags().Lookup(name) == nil && cmd.PersistentFlags().Lookup(name) == nil {
			return
		}
		_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	for name, values := range flagValues {
		register(root, name, values)
		for _, sub := range root.Commands() {
			register(sub, name, values)
		}
	}
	refuseUnknownShells(root)
}

// refuseUnknownShells makes "baton completion SHELL" for a shell it has no
// script for a usage error (exit 2) instead of cobra's help and exit 0,
// which a script would take for success.
func refuseUnknownShells(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" || c.Runnable() {
			continue
		}
		var shells []string
		for _, sh := range c.Commands() {
			shells = append(shells, sh.Name())
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return usageErrorf("no completion script for the shell %q: baton completion writes one for %s", args[0], strings.Join(shells, ", "))
		}
	}
}
