package cli

import (
	"errors"
	"fmt"

	"github.com/baton-go/baton/backend"
	"github.com/spf13/cobra"
)

const removeLong = `Delete the records of free locks, for lock names that are not used again
(a lock per file, order or tenant, or a job's lock per run): each lock
leaves a record in the store after its release, for ever (an object on
Kubernetes, keys on Redis and etcd, three files on the file backend).

A lock that is held (or, on Redis and etcd, that a waiter has queued for)
is never removed: it is named, the others are removed, and baton exits
with code 75. The fencing tokens of a removed name go on increasing when
it is locked again: every backend keeps what it needs for that (see
docs/backends.md). A process that saw the lock held may count the removal
as a deletion of the record and wait for the lock's TTL before it takes it
again, so remove only locks that will not be used again soon. A NAME
without a record is not an error.

On Kubernetes removal needs the delete verb on the lock's resource, which
taking locks does not.`

func (a *app) removeCommand() *cobra.Command {
	var f storeFlags
	cmd := &cobra.Command{
		Use:   "remove NAME...",
		Short: "Delete the records of free locks that are not used again",
		Long:  removeLong,
		Example: `  baton remove files.q3-report-csv-34ywre3qz2nheydl2m5a2jxqwq
  baton status -o json | jq -r '.items[] | select((.held | not) and (.name | startswith("files."))) | .name' | xargs -r baton remove`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("remove takes one or more lock NAMEs")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				if err := checkName("NAME", name); err != nil {
					return err
				}
			}
			if err := f.validate(); err != nil {
				return err
			}
			if f.dirMissing() {
				return fmt.Errorf("no lock removed: %s does not exist (check --dir or $BATON_DIR)", f.dir)
			}
			st, _, err := f.open()
			if err != nil {
				return err
			}
			defer closeStore(st)
			rm, ok := st.(backend.Remover)
			if !ok {
				return fmt.Errorf("the %s backend cannot remove locks", f.backend)
			}
			return a.remove(cmd, st, rm, args)
		}),
	}
	f.register(cmd.Flags())
	return cmd
}

// remove removes each name, goes on past held ones, and fails with
// ExitHeld if there were any; another error stops it.
func (a *app) remove(cmd *cobra.Command, st backend.Backend, rm backend.Remover, names []string) error {
	var held []string
	for _, name := range names {
		_, err := st.Get(cmd.Context(), name)
		if errors.Is(err, backend.ErrNotFound) {
			if _, err := fmt.Fprintf(a.stdout, "%s has no record\n", name); err != nil {
				return err
			}
			continue
		}
		if err == nil {
			err = rm.Remove(cmd.Context(), name)
		}
		if errors.Is(err, backend.ErrHeld) {
			fmt.Fprintf(a.stderr, "baton: not removed: %v\n", err)
			held = append(held, name)
			continue
		}
		if err != nil {
			return fmt.Errorf("removing lock %q: %w", name, err)
		}
		if _, err := fmt.Fprintf(a.stdout, "removed %s\n", name); err != nil {
			return err
		}
	}
	if len(held) > 0 {
		return failf(ExitHeld, "%d of %d locks not removed: held, or queued for (%q)", len(held), len(names), held)
	}
	return nil
}
