package cli

import (
	"errors"
	"fmt"

	"github.com/baton-go/baton/backend"
	"github.com/spf13/cobra"
)

const releaseLong = `Free a lock whoever holds it: an administrator's action, for a holder that
is gone but whose claim has not expired yet, or one that must be stopped.

The fencing counter is kept: the next holder gets a larger token. The former
holder learns of the release at its next renewal; "baton run" and "baton
lock" then kill their command at once with SIGKILL, since another holder may
already be running. Until then the former holder may still act: a resource
that checks fencing tokens rejects its late writes.

--force is required, so that the command cannot be mistaken for a graceful
release (a holder releases its own lock by exiting).`

func (a *app) releaseCommand() *cobra.Command {
	var (
		f     storeFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:     "release NAME --force",
		Short:   "Free a lock whoever holds it (administrators)",
		Long:    releaseLong,
		Example: `  baton release nightly-report --force`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("release takes exactly one lock NAME, got %d arguments: %q", len(args), args)
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("NAME", name); err != nil {
				return err
			}
			if !force {
				return usageErrorf("release of lock %q needs --force: it frees the lock whoever holds it, and the holder's command is killed at its next renewal", name)
			}
			if err := f.validate(); err != nil {
				return err
			}
			if f.dirMissing() {
				return fmt.Errorf("lock %q not found: %s does not exist (check --dir or $BATON_DIR)", name, f.dir)
			}
			st, where, err := f.open()
			if err != nil {
				return err
			}
			defer closeStore(st)
			fr, ok := st.(backend.ForceReleaser)
			if !ok {
				return fmt.Errorf("the %s backend cannot force-release locks", f.backend)
			}
			ctx := cmd.Context()
			before, err := st.Get(ctx, name)
			if errors.Is(err, backend.ErrNotFound) {
				return fmt.Errorf("lock %q not found in %s", name, where)
			}
			if err != nil {
				return err
			}
			if err := fr.ForceRelease(ctx, name); err != nil {
				return err
			}
			if !before.Held() {
				_, err = fmt.Fprintf(a.stdout, "lock %q was not held (last token %d); nothing to do\n", name, before.Token)
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "released lock %q, held by %q with token %d; the next holder gets a larger token\n",
				name, before.Holder, before.Token)
			return err
		}),
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&force, "force", false, "confirm: free the lock whoever holds it")
	return cmd
}
