// Command baton runs commands under distributed locks with fencing tokens.
// Install it with
//
//	go install github.com/baton-go/baton/cmd/baton@latest
//
// once a release is tagged; between releases build it from a clone
// (docs/cli.md, "Install"). baton version names the release it was built
// from.
//
//	go -C cmd/baton run . demo
//
// run from the repository's root (the command is its own module), or baton
// demo, shows it on this machine: three replicas of "baton run" on the file backend, a
// leader crash (SIGKILL) and a takeover with a larger token after the
// TTL, then a handover on release (SIGTERM), in about 10 seconds.
//
// baton builds on Unix-like systems only (Linux, macOS, the BSDs): it
// supervises CMD through process groups and signals.
//
// # Commands
//
//	baton run --name NAME [flags] -- CMD [ARGS...]
//
// Runs CMD only while this process is the leader of lock NAME, with
// BATON_LOCK, BATON_HOLDER and BATON_TOKEN (the fencing token of the term) in
// its environment. CMD (under run and lock) gets baton's standard input,
// output and error as they are: the same descriptors, nothing copied or
// buffered, baton's log lines on stderr between CMD's. Standbys wait and
// take over when the leader releases the lock, or once its claim has
// expired (--ttl after its last renewal) if it died. When CMD exits on its own, baton releases the lock and exits with
// CMD's exit code (128+N if signal N ended it); to lead for as long as baton
// runs, CMD must not exit. After a loss, baton stops CMD (see below),
// campaigns again and restarts CMD with a new token when it leads again.
//
// With --http ADDR, run serves /healthz and /readyz (200 while baton runs,
// even while the store does not answer: the readiness probe), /leader (200 only while this replica leads, 503
// naming the leader otherwise; for scripts and monitoring, never for
// readiness: standbys would never be Ready and a rolling update would stall;
// --leader-label routes a Service to the leader) and /metrics (Prometheus;
// see docs/metrics.md).
//
//	baton lock --name NAME [--wait D] [flags] -- CMD [ARGS...]
//
// Runs CMD once while holding the lock, like flock(1) across processes, and
// exits with CMD's exit code. --wait is "forever" by default; 0 tries once.
// When the wait runs out, baton exits with code 75 (EX_TEMPFAIL) and names
// the holder (not with --log-level error: as quiet as flock -n, for cron).
// If the lock is lost while CMD runs, CMD is stopped as below and baton
// exits with code 1 (78 if the loss shows the setup cannot work: the file
// backend's directory shared with another machine).
//
//	baton status [NAME] [-o wide|json|yaml] [--watch]
//
// Shows who holds a lock (or every lock): NAME, HOLDER ("<none>" if free),
// TOKEN, RENEWED, EXPIRES-IN ("-" if free), TRANSITIONS; -o wide adds TTL,
// ACQUIRED and VERSION. -o json and -o yaml print a stable view of the
// records (one object for NAME, {"items": [...]} for all). --watch prints
// again when a lock changes hands, is released or expires.
//
//	baton release NAME --force
//
// Frees a lock whoever holds it, keeping its fencing counter (an
// administrator's action). The holder learns of it at its next renewal and
// kills its CMD at once.
//
//	baton remove NAME...
//
// Deletes the records of free locks that are not used again (a lock per
// file, order or tenant), which stay in the store after their release;
// tokens of a removed name locked again still grow. Held locks (and, on
// Redis and etcd, those a waiter has queued for) are named and kept, with
// exit code 75.
//
//	baton name KEY
//
// Prints a valid lock name for any KEY (an e-mail address, a path, a URL):
// baton.NameFor(KEY), so that scripts and Go programs name one entity's
// lock alike.
//
// # Losing the lock: the kill schedule
//
// A holder's validity ends at the send time of its last successful renewal
// plus TTL minus a safety margin, on its own monotonic clock (see
// baton.Lease). When renewals have failed for --renew-deadline, baton steps
// down: it sends CMD SIGTERM at once and SIGKILL at the validity end minus
// max(safety margin, 100ms), so that CMD is dead before any other contender
// can acquire the lock. If that moment has already passed when the loss is
// noticed (the process was paused, say by SIGSTOP, for longer than the TTL),
// CMD gets SIGKILL at once. When the store itself says the claim is someone
// else's (an administrator force-released it, or it expired and was taken),
// another holder may be running already, so CMD gets SIGKILL at once too. A write CMD made during such a pause can only be stopped
// by the resource itself: have it reject tokens smaller than the largest it
// has seen.
//
// # Signals and process lifetime
//
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to
// CMD while it runs, each
// followed by SIGCONT, so that they reach a CMD that is stopped (by
// SIGTTIN: it read from the terminal); baton then
// waits for CMD, releases the lock and exits with CMD's exit code. A CMD
// that survives one of the last four (a reload, a thread dump) leads on, and
// run still campaigns again after a loss; SIGINT and SIGTERM ask run to
// stop once CMD has exited. Before CMD
// runs (while campaigning or waiting), they stop baton at once with exit
// code 128+N. One that baton was started ignoring (nohup ignores SIGHUP)
// stays ignored by baton and by CMD. CMD runs in a process group of its own, and baton signals the
// whole group, so the processes CMD starts stop with it; a signal sent to
// baton's own group (Ctrl-C in a terminal) reaches CMD only as forwarded. On
// Linux a watchdog process in CMD's group SIGKILLs the group at the kill
// point even while baton is stopped, hung or starved, and at once if baton
// dies; the kernel also kills CMD if baton dies, even by SIGKILL
// (PR_SET_PDEATHSIG). baton is a child subreaper (PR_SET_CHILD_SUBREAPER):
// CMD's orphaned descendants become its children, are reaped so none stays a
// zombie, and are killed at the end of the term. docs/cli.md has the table of
// what is guaranteed in each case.
//
// # Backends
//
// --backend selects the store:
//
//	file       processes on one machine (the default); records in --dir
//	lease      Kubernetes Lease objects (coordination.k8s.io/v1)
//	configmap  Kubernetes ConfigMaps, for clusters that allow only those
//	crd        baton's DistributedLock resource (install deploy/crd first)
//	etcd       etcd: --endpoints URL[,URL...] [--cacert --cert --key --user] [--fair=false]
//	redis      one Redis server: --redis-url redis[s]://[user:pass@]host:port[/db]
//	           [--cacert --cert --key, for rediss://]
//	redlock    Redlock over an odd number (at least 3) of independent Redis
//	           servers: --redis-url once per server
//
// A flag of another backend than the one selected is a usage error (exit
// 2), never ignored: --redis-url without --backend redis would otherwise
// lock on this machine only, where every other machine may take the same
// lock.
//
// Passwords on the command line can be read by every user of the machine
// (ps). $BATON_REDIS_URL gives --redis-url (several URLs separated by
// spaces) and $BATON_ETCD_PASSWORD the password of --user instead; baton
// does not pass either on to CMD. $BATON_REDIS_URL without --backend is a
// usage error, as --redis-url is.
//
// The Kubernetes backends load their connection like kubectl: --kubeconfig,
// else $KUBECONFIG, else ~/.kube/config, else the pod's service account;
// --context and -n/--namespace override the kubeconfig's. --app names the
// application that owns the lock names (label baton.dev/app): another
// application's lock of the same name is refused with an error, not shared.
// A Lease that client-go's leader election wrote is refused too, unless run
// or lock is given --adopt (lease backend only): then it is taken over once
// its claim ends, so that the replicas of a binary that did its own leader
// election move to baton run one at a time, on the same Lease.
//
// The file backend's --dir defaults to $BATON_DIR; else /var/lib/baton for
// root, and $XDG_STATE_HOME/baton (~/.local/state/baton) for other users, so
// that fencing tokens keep increasing across reboots; else
// <temp dir>/baton-<uid> when there is no home directory (refused, exit 78,
// if another user made it first, or may write it). Processes share a
// lock only if they use the same directory, which must be given as an
// absolute path.
//
// # Timing
//
// --ttl 15s, --renew-deadline 10s and --retry-period 2s by default (as in
// client-go's leader election); with another --ttl, the renew deadline and
// retry period not given scale with it (2/3 and 2/15 of it). The holder
// renews every TTL/3. Impossible
// combinations (RenewDeadline >= TTL, RetryPeriod >= RenewDeadline,
// TTL < 1s, TTL > a year) are usage errors whose message names the values.
//
// # Exit codes
//
//	0      success
//	N      under run and lock: CMD's exit code (128+N if signal N ended CMD)
//	1      runtime error: the store failed, or lock lost the lock while CMD ran
//	2      usage error: unknown flag, invalid value, impossible timing,
//	       invalid lock name, missing CMD, unknown backend or output
//	       format, a flag of another backend than the one selected
//	69     the store could not be reached: for --connect-timeout (default
//	       10s) at start-up, or when --wait ran out
//	75     lock: another owner held the lock when --wait ran out;
//	       remove: a lock was held (or queued for), and kept
//	77     the store refused the credentials or the operation (RBAC, ACL)
//	78     the store's setup cannot work: a missing namespace (or one
//	       being deleted) or CRD, a TLS setup that fails, a missing
//	       kubeconfig, a URL whose server is of the wrong kind (a
//	       sentinel, another protocol)
//	126    CMD could not be started
//	127    CMD was not found
//	128+N  run or lock stopped by signal N before CMD started
//
// Logs go to stderr, as log/slog text (key=value) or, with --log-format
// json, one JSON object per line, durations written as in text ("2.5s");
// --log-level debug|info|warn|error.
package main
