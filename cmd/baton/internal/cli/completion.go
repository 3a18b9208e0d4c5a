package cli

import (
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
}
