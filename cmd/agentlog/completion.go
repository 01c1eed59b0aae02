package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/projector"
	"github.com/spf13/cobra"
)

// completeSessionIDs completes the first argument with session ids (at most 200) read from
// --nats within 3 s; nothing when the server cannot be reached.
func (g *globals) completeSessionIDs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	// Completion runs no pre-run hook: the connection settings are resolved here.
	if err := g.conn.resolve(g, cmd.Root().PersistentFlags()); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	nc, c, err := g.client("agentlog-complete")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	defer nc.Close()
	ids, err := c.SessionIDs(ctx, toComplete, 200)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// completeUnits completes the first argument with the registered projection units.
func completeUnits(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	reg, err := projector.NewRegistry()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, k := range reg.Keys() {
		if strings.HasPrefix(k, toComplete) {
			out = append(out, k)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// withUnitCompletion makes c complete its first argument with unit names.
func withUnitCompletion(c *cobra.Command) *cobra.Command {
	c.ValidArgsFunction = completeUnits
	return c
}

// withIDCompletion makes c complete its first argument with session ids.
func withIDCompletion(g *globals, c *cobra.Command) *cobra.Command {
	c.ValidArgsFunction = g.completeSessionIDs
	return c
}

// refuseUnknownShell makes cobra's completion command, which has a subcommand per shell and no Run
// of its own (so it printed its help and exited 0 for any other argument), a usage error (exit 2)
// without a shell or with one it does not know.
func refuseUnknownShell(c *cobra.Command) {
	var shells []string
	for _, s := range c.Commands() {
		shells = append(shells, s.Name())
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		want := strings.Join(shells, ", ")
		if len(args) == 0 {
			return &usageError{fmt.Errorf("%s takes a shell: one of %s (see %s --help)", cmd.CommandPath(), want, cmd.CommandPath())}
		}
		return &usageError{fmt.Errorf("%s: unknown shell %q: want one of %s (see %s --help)", cmd.CommandPath(), args[0], want, cmd.CommandPath())}
	}
}
