package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
)

const doctorLong = `Check that baton can work here, without taking any lock: the timing
settings, the identity and the store's reachability (and the lock's holder
with --name); on a network store, its round trip (the fastest of three reads;
on Redlock, each server's PINGs, a quorum's counting), judged against the timings: it fails when a renew has less than two round
trips before the renew deadline and warns when a round trip is longer than
the retry period, naming the --ttl that would work; on the file backend, the lock directory's file system (not a
network one, not one in memory, not full, not a container's own overlay), its mode (not writable by
every user) and the boot ID that claims carry (not a container's own, as
systemd-nspawn and LXC give); on Kubernetes, that the namespace exists
and is not being deleted, that the DistributedLock CRD is installed
(--backend crd), every verb the lock needs (with SelfSubjectAccessReview),
that the cluster's admission policies accept the lock object (a
server-side dry-run create, which stores nothing) and whether the lock name is already used by another application; on Redis, that a
redis:// URL reaches a primary, not a replica or a Cluster node (INFO
replication and cluster), each server's persistence (INFO persistence), whether it may evict the locks' keys at its memory
limit (INFO memory) and whether the user may run every command the lock
needs (redis.acl_check_cmd, Redis 7 or later), and on Redlock that the URLs
reach different servers (INFO server's run_id); on etcd, each endpoint's
status, version and alarms, and whether the user may read and write the
lock's keys. Prints one row per check, the first naming this binary's
version (what "baton version" prints, on one line: quote it in a bug
report), and, for each problem, the fix. Exits 1 if any check fails.`

// The results of a check. SKIP marks a check that could not run because
// an earlier row failed (its detail names the row).
const (
	resultPass = "PASS"
	resultWarn = "WARN"
	resultFail = "FAIL"
	resultSkip = "SKIP"
)

// check is one row of the doctor's report.
type check struct {
	name   string
	result string // one of the result constants
	detail string
	fix    string
}

func (a *app) doctorCommand() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "doctor [--backend B] [--name NAME] [flags]",
		Short: "Check permissions, timings, identity and name collisions",
		Long:  doctorLong,
		Example: `  baton doctor --backend lease -n jobs --name nightly-report --app reports
  baton doctor --name nightly-report --ttl 30s`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if f.name != "" {
				if err := checkName("--name", f.name); err != nil {
					return err
				}
			}
			if err := f.storeFlags.validate(); err != nil {
				return err
			}
			checks := a.doctor(cmd.Context(), &f)
			if err := printChecks(a.stdout, checks); err != nil {
				return err
			}
			for _, c := range checks {
				if c.result == "FAIL" {
					return exitCode(ExitFailure)
				}
			}
			return nil
		}),
	}
	f.register(cmd.Flags())
	cmd.Flags().Lookup("name").Usage = "lock name to check for collisions (optional)"
	cmd.Flags().Lookup("connect-timeout").Usage = "how long the store row waits for the store to connect and answer"
	return cmd
}

func (a *app) doctor(ctx context.Context, f *lockFlags) []check {
	checks := []check{versionCheck(), timingCheck(f, a)}
	checks = append(checks, identityCheck(f))
	f.etcd.dialTimeout = min(f.connectTimeout, etcdstore.DefaultDialTimeout)
	st, where, err := f.open()
	if err != nil {
		checks = append(checks, storeFailure(err))
	} else {
		defer closeStore(st)
		var c check
		var rec backend.Record
		c, rec, err = a.storeCheck(ctx, st, where, f.name, f.connectTimeout)
		checks = append(checks, c)
		if err == nil && f.backend != "file" {
			checks = append(checks, roundTripCheck(ctx, st, probeName(f.name), f))
		}
		if f.identity != "" && f.name != "" && rec.Held() && rec.Holder == f.identity {
			checks = append(checks, check{"identity in use", resultFail,
				fmt.Sprintf("lock %q is held right now by identity %q, the one given here: if that is another process, two replicas share an identity", f.name, f.identity),
				"give every replica its own identity, such as the pod name, or leave --identity out (the default adds a random suffix)"})
		}
	}
	switch f.backend {
	case "file":
		checks = append(checks, fileSystemCheck(st), dirModeCheck(st), bootIDCheck(st))
	case "lease", "configmap", "crd":
		switch {
		case errors.Is(err, backend.ErrUnavailable):
			checks = append(checks, check{"kubernetes", resultSkip, "not checked: the API server cannot be reached (see the store row)", ""})
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			// A server that accepts connections and never answers: every
			// row that asks it would wait for it too (kubeCheckTimeout,
			// 30 s in all) and blame its own subject.
			checks = append(checks, check{"kubernetes", resultSkip, "not checked: the API server did not answer within --connect-timeout (see the store row)", ""})
		case errors.Is(err, kubestore.ErrNotAPIServer):
			checks = append(checks, check{"kubernetes", resultSkip, "not checked: the server is not a Kubernetes API server (see the store row)", ""})
		case errors.Is(err, backend.ErrMisconfigured) && noRequestReached(err):
			// A proxy that asks for authentication, TLS that cannot
			// succeed, a credential plugin that cannot run: every row
			// would fail as the store row did, less clearly.
			checks = append(checks, check{"kubernetes", resultSkip, "not checked: no request can reach the API server as configured (see the store row)", ""})
		case f.kube.loaded != nil: // else the store row says why there is no client configuration
			checks = append(checks, a.kubeChecks(ctx, f)...)
		}
	case "redis":
		if errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrMisconfigured) {
			// One server, which the store row could not reach or talk to:
			// its rows would only repeat that failure with less of its
			// cause. (A refusal keeps them: the permissions row names
			// what is missing.)
			u := redactURL(f.redisURLs[0])
			checks = append(checks,
				check{"persistence " + u, resultSkip, "not checked: the store row failed (its detail says why)", ""},
				check{"eviction " + u, resultSkip, "not checked: the store row failed (its detail says why)", ""},
				check{"permissions " + u, resultSkip, "not checked: the store row failed (its detail says why)", ""})
			break
		}
		checks = append(checks, redisChecks(ctx, f.redisURLs, probeName(f.name), f.app, f.redisTLS())...)
	case "redlock":
		if f.redisTLSFilesErr() != nil {
			checks = append(checks, check{"redis TLS", resultSkip, "not checked: the servers' rows need the TLS files (see the store row)", ""})
			break
		}
		checks = append(checks, redisChecks(ctx, f.redisURLs, probeName(f.name), f.app, f.redisTLS())...)
		checks = append(checks, independenceCheck(ctx, f.redisURLs, f.redisTLS()))
	case "etcd":
		rows, answered := etcdChecks(ctx, &f.etcd)
		checks = append(checks, rows...)
		checks = append(checks, etcdPermissionsCheck(ctx, st, probeName(f.name), answered))
	}
	return checks
}

// versionCheck names this binary's build (what baton version prints), for
// a report to say which baton it came from.
func versionCheck() check {
	return check{"baton", resultPass, versionSummary(), ""}
}

// timingCheck validates the timing flags as baton does and says what they
// mean for a holder cut off from the store.
func timingCheck(f *lockFlags, a *app) check {
	if err := baton.CheckOptions(false, f.options(a.log)...); err != nil {
		return check{"timing", resultFail, err.Error(),
			"choose --ttl, --renew-deadline and --retry-period with retry < renew deadline < TTL minus the safety margin; or give --ttl alone, and the others scale with it"}
	}
	ttl := f.ttl
	if most := v1alpha1.MaxLeaseDurationSeconds * time.Second; f.backend == "crd" && (ttl+time.Second-1).Truncate(time.Second) > most { // rounded up, as the object stores it
		return check{"timing", resultFail, fmt.Sprintf("TTL %v is longer than the DistributedLock maximum of %v (the CRD's schema refuses longer leases): baton lock and run exit 2", ttl, most),
			fmt.Sprintf("give --ttl %v or less, or use --backend lease", most)}
	}
	rd, _, _ := f.timings()
	margin := baton.DefaultSafetyMargin(ttl)
	return check{"timing", resultPass, fmt.Sprintf(
		"TTL %v, renew deadline %v: a holder cut off from the store stops %v after its last good renew, %v before anyone else may take over",
		ttl, rd, rd, ttl-margin-rd), ""}
}

// identityCheck warns about a fixed --identity, which replicas may share.
func identityCheck(f *lockFlags) check {
	if f.identity != "" {
		return check{"identity", resultWarn, fmt.Sprintf("--identity %q is fixed: two replicas started with the same value are shown as one holder (baton still tells them apart by a per-acquisition nonce)", f.identity),
			"give every replica its own identity, such as the pod name, or leave --identity out"}
	}
	return check{"identity", resultPass, fmt.Sprintf("default identity (here %s): the host name plus a random suffix, new for every process", baton.DefaultIdentity()), ""}
}

// storeCheck reads the lock (or any lock) to show that the store answers.
// It also returns the record of the lock name when it exists (else the zero
// Record), for the checks that depend on it, and the error of a store that
// did not answer within timeout (--connect-timeout).
func (a *app) storeCheck(ctx context.Context, st store, where, name string, timeout time.Duration) (check, backend.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := st.Get(ctx, probeName(name))
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return check{"store", resultPass, "reached " + where, ""}, backend.Record{}, nil
	case err != nil:
		return storeFailure(err), backend.Record{}, err
	case name != "" && r.Held():
		return check{"store", resultPass, fmt.Sprintf("reached %s; lock %q is held by %q (token %d)", where, name, r.Holder, r.Token), ""}, r, nil
	case name != "":
		return check{"store", resultPass, "reached " + where, ""}, r, nil
	}
	return check{"store", resultPass, "reached " + where, ""}, backend.Record{}, nil
}

// probeName is the lock the store rows read, and the Redis permissions
// row asks about: --name, or a name of no lock's if none was given.
func probeName(name string) string {
	if name == "" {
		return "doctor-probe"
	}
	return name
}

// storeFailure is the store row for a store that could not be opened or
// read: its detail starts with the cause, by the baton sentinel the error
// matches, and its fix is the one for that cause.
func storeFailure(err error) check {
	cause, fix := diagnose(err)
	return check{"store", resultFail, cause + ": " + err.Error(), fix}
}

// diagnose names the cause of a store error, by the baton sentinel it
// matches, and the fix for that cause.
func diagnose(err error) (cause, fix string) {
	switch {
	case errors.Is(err, backend.ErrForbidden):
		return "no permission", "give this identity the permissions the error names (the store refused the operation or the credentials)"
	case errors.Is(err, backend.ErrMisconfigured):
		return "misconfigured", "the setup cannot work as given (a missing client configuration, namespace or CRD, TLS that cannot succeed, the wrong service at that address): apply the fix the error names; no lock can be taken until then"
	case errors.Is(err, kubestore.ErrThrottled):
		return "throttled", "the API server answers, but throttles this identity's requests (429 Too Many Requests): locks wait and renewals fail while it lasts; " +
			"give the identity a FlowSchema of its own with a PriorityLevelConfiguration that has room (kubectl get flowschemas,prioritylevelconfigurations), or lower the load on the API server"
	case errors.Is(err, backend.ErrUnavailable) && storeAnswered(err):
		return "busy", "the store answered, but cannot serve the lock now (the error says why: a hash slot being moved, a failover, data loading after a restart, too few replicas, memory full); " +
			"baton lock and run retry it for --connect-timeout, then exit 69, and a holder steps down if it lasts past the renew deadline: wait for it to end, or end it"
	case errors.Is(err, backend.ErrUnavailable):
		return "unreachable", "start the store or correct its address (the error says which); baton lock and run retry an unreachable store for --connect-timeout, then exit 69"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time", "check the address, the network path and the store's load"
	case errors.Is(err, backend.ErrCorruptRecord):
		return "corrupt lock record", "baton never overwrites a record it cannot read (that could reset the fencing counter): inspect the record the error names and do what the error says (remove a damaged record only as it says; one written by a newer baton needs that version in every process, not removal); no process of this version can take that lock until then"
	}
	return "error", "check the backend flags, the network path and the permissions to read lock records"
}

// printChecks writes the table of checks and, below it, each check's fix
// and the lines of its detail after the first: a table cell holds one
// line, or tabwriter would misalign the rows that follow.
func printChecks(w io.Writer, checks []check) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range checks {
		first, rest := splitDetail(c.detail)
		if rest != "" {
			first += " (continued below)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", oneLine(c.name), c.result, first)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, c := range checks {
		_, rest := splitDetail(c.detail)
		if c.fix == "" && rest == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nFixes:")
			first = false
		}
		fmt.Fprintf(w, "\n%s (%s):\n", oneLine(c.name), c.result)
		for _, text := range []string{rest, c.fix} {
			if text != "" {
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(text, "\n", "\n  "))
			}
		}
	}
	return nil
}

// splitDetail returns a detail's first line, for the table, and the rest.
// Tabs become spaces: tabwriter would read them as cell separators.
func splitDetail(detail string) (first, rest string) {
	detail = strings.ReplaceAll(strings.TrimSpace(detail), "\t", " ")
	first, rest, _ = strings.Cut(detail, "\n")
	return strings.TrimSpace(first), strings.TrimSpace(rest)
}

// oneLine makes a check name safe for a table cell.
func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}
