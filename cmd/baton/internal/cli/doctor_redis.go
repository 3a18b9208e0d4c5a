package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
	"github.com/baton-go/baton/redisstore"
)

// redisCheckTimeout bounds the questions doctor asks one Redis server.
const redisCheckTimeout = 5 * time.Second

// aofFix is the fix for a server whose restart would lose claims or
// counters.
const aofFix = "run the server with appendonly yes and appendfsync always (redis.conf, or CONFIG SET appendfsync always, CONFIG SET appendonly yes, then, once INFO persistence shows aof_rewrite_in_progress:0, CONFIG REWRITE: " +
	"switching the append-only file on starts a rewrite, and until it ends the file holds nothing): " +
	"without them a restart or crash frees held locks while their holders still run, and only fencing refuses the old holders' late writes (tokens keep growing, from the server's clock: docs/backends.md)"

// aofRewriteFix is the fix for a server whose append-only file is being
// rewritten, perhaps the rewrite that switching it on starts.
const aofRewriteFix = "wait until INFO persistence shows aof_rewrite_in_progress:0 and aof_rewrite_scheduled:0, then run doctor again; " +
	"if appendonly was switched on with CONFIG SET, run CONFIG REWRITE only then"

// redisURLFix is the fix for a --redis-url that does not parse.
const redisURLFix = "write the URL as redis://[user:password@]host:port[/db] (rediss:// for TLS)"

// evictionFix is the fix for a server that may evict baton's keys.
const evictionFix = "keep baton's locks on a Redis that evicts nothing: maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy noeviction then CONFIG REWRITE; on a managed service, its parameter group), or no maxmemory; a cache that must evict needs a Redis of its own (docs/backends.md)"

// redisChecks asks each server whether it is a primary outside a Cluster
// (for a redis:// or rediss:// URL), reads its persistence settings and
// eviction policy, and asks it whether the user may run what baton sends
// for lock name of application app (see --app): three or four rows per
// --redis-url.
func redisChecks(ctx context.Context, urls []string, name, app string, tlsFn redisstore.Option) []check {
	checks := make([]check, 0, 4*len(urls))
	for _, u := range urls {
		if r, ok := roleCheck(ctx, u, tlsFn); ok {
			checks = append(checks, r)
		}
		p := persistenceCheck(ctx, u, tlsFn)
		checks = append(checks, p)
		if p.result == resultFail {
			skip := "not checked: the persistence row failed (its detail says why)"
			checks = append(checks, check{"eviction " + redactURL(u), resultSkip, skip, ""}, check{"permissions " + redactURL(u), resultSkip, skip, ""})
			continue
		}
		checks = append(checks, evictionCheck(ctx, u, tlsFn), permissionsCheck(ctx, u, name, app, tlsFn))
	}
	return checks
}

// independenceCheck asks each server of a Redlock for its run_id (INFO
// server), which a redis-server draws at start: two URLs that reach one
// server (localhost and 127.0.0.1, a DNS alias, a proxy) are one instance
// counted twice, and a quorum of them is not a majority of servers.
func independenceCheck(ctx context.Context, urls []string, tlsFn redisstore.Option) check {
	const label = "independent servers"
	ids := map[string]string{} // run_id -> the URL that reached it
	var denied, silent []string
	for _, u := range urls {
		id, err := runID(ctx, u, tlsFn)
		switch {
		case infoRefused(err) != "":
			denied = append(denied, redactURL(u))
			continue
		case err != nil:
			silent = append(silent, redactURL(u))
			continue
		}
		if first, dup := ids[id]; dup {
			return check{label, resultFail, fmt.Sprintf("%s and %s reach the same redis-server (run_id %s): Redlock counts its answer twice, so one server's failure or lost data can cost a quorum", redactURL(first), redactURL(u), id),
				"give each --redis-url a different redis-server, on its own machine (not a replica of another)"}
		}
		ids[id] = u
	}
	switch {
	case len(denied) > 0:
		return check{label, resultWarn, fmt.Sprintf("cannot tell whether the servers are distinct: INFO is refused (to the user, or disabled on the server) on %s", strings.Join(denied, ", ")),
			"an operator runs: redis-cli -h HOST -p PORT INFO server (on each server)\nand checks that every run_id differs"}
	case len(silent) > 0:
		return check{label, resultSkip, fmt.Sprintf("%d of %d servers answered, each a different redis-server; not checked: %s (see their rows)", len(ids), len(urls), strings.Join(silent, ", ")), ""}
	}
	return check{label, resultPass, fmt.Sprintf("the %d URLs reach %d different redis-servers (run_id)", len(urls), len(ids)), ""}
}

// runID asks the server at rawURL for its run_id (INFO server).
func runID(ctx context.Context, rawURL string, tlsFn redisstore.Option) (string, error) {
	client, err := questionClient(rawURL, tlsFn)
	if err != nil {
		return "", err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	id, ok := infoField(info, "run_id")
	if !ok || id == "" {
		return "", fmt.Errorf("INFO server has no run_id")
	}
	return id, nil
}

// questionClient is a client of the server at rawURL (with tlsFn, the TLS files:
// see storeFlags.redisTLS) for one question: one attempt, so that a row
// reports what happened.
func questionClient(rawURL string, tlsFn redisstore.Option) (*redis.Client, error) {
	opt, err := redisstore.ParseURL(rawURL, tlsFn)
	if err != nil {
		return nil, err
	}
	opt.MaxRetries = -1
	return redisstore.NewClient(opt), nil
}

// evictionCheck asks each primary behind rawURL for its memory limit and
// eviction policy (redisstore.Store.MemoryPolicies): it fails if Redis may
// evict a lock's fence (allkeys-*), which lets a second holder in, and
// warns if it may evict a lock's key (volatile-*), which ends a holder's
// lock early.
func evictionCheck(ctx context.Context, rawURL string, tlsFn redisstore.Option) check {
	label := "eviction " + redactURL(rawURL)
	return askStore(ctx, rawURL, label, "", tlsFn, func(ctx context.Context, s *redisstore.Store) check {
		policies, err := s.MemoryPolicies(ctx)
		return evictionRow(label, policies, err)
	})
}

// evictionRow judges the policies MemoryPolicies returned.
func evictionRow(label string, policies []redisstore.MemoryPolicy, err error) check {
	switch {
	case errors.Is(err, backend.ErrForbidden), errors.Is(err, errors.ErrUnsupported):
		return check{label, resultWarn, "cannot tell whether Redis may evict the locks' keys: " + err.Error(),
			"an operator runs: redis-cli -h HOST -p PORT INFO memory (on each primary)\nand looks for maxmemory:0 or maxmemory_policy:noeviction. Otherwise: " + evictionFix}
	case err != nil:
		return redisFailure(label, err)
	case len(policies) == 0:
		return check{label, resultWarn, "cannot tell whether Redis may evict the locks' keys: no primary answered", evictionFix}
	}
	worst := policies[0]
	for _, p := range policies[1:] {
		if severity(p) > severity(worst) {
			worst = p
		}
	}
	setting := fmt.Sprintf("%s has maxmemory %s and maxmemory-policy %s", worst.Addr, sizeIEC(worst.MaxMemory), worst.Policy)
	switch worst.Evicts() {
	case "fences":
		return check{label, resultFail, setting + ": at that limit Redis evicts any key, a held lock's key and fence among them, and another process then takes the lock while its holder still runs", evictionFix}
	case "claims":
		return check{label, resultWarn, setting + ": at that limit Redis may evict a held lock's key (it expires): its holder then loses the lock and its command is stopped early (the fence, which does not expire, keeps everyone else out until the claim could have expired)", evictionFix}
	}
	detail := "no maxmemory: Redis evicts nothing"
	if worst.MaxMemory > 0 {
		detail = fmt.Sprintf("maxmemory-policy noeviction: Redis evicts nothing (at maxmemory, %s, new acquisitions fail until memory is freed; holders keep renewing)", sizeIEC(worst.MaxMemory))
	}
	if len(policies) > 1 {
		detail = fmt.Sprintf("on each of %d primaries, %s", len(policies), detail)
	}
	return check{label, resultPass, detail, ""}
}

// sizeIEC writes a size in bytes in the units Redis's "mb" and "gb"
// mean (powers of 1024): "3 MiB", "1.5 GiB", "1000 bytes".
func sizeIEC(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return fmt.Sprintf("%.4g %s", float64(n)/float64(u.size), u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// severity orders eviction policies by what they can do to a lock.
func severity(p redisstore.MemoryPolicy) int {
	switch p.Evicts() {
	case "fences":
		return 2
	case "claims":
		return 1
	}
	return 0
}

// permissionsCheck asks the server at rawURL whether the URL's user may run
// every command of redisstore.ACLRules on lock name's keys and channels
// (redisstore.Store.CheckPermissions), under application app's prefix.
func permissionsCheck(ctx context.Context, rawURL, name, app string, tlsFn redisstore.Option) check {
	label := "permissions " + redactURL(rawURL)
	return askStore(ctx, rawURL, label, app, tlsFn, func(ctx context.Context, s *redisstore.Store) check {
		return permissionsRow(label, rawURL, name, s.CheckPermissions(ctx, name))
	})
}

// askStore opens a Store on rawURL (with tlsFn, see storeFlags.redisTLS,
// for application app) for the doctor row label and asks it with ask,
// within redisCheckTimeout.
func askStore(ctx context.Context, rawURL, label, app string, tlsFn redisstore.Option, ask func(context.Context, *redisstore.Store) check) check {
	s, err := redisstore.Open(rawURL, redisstore.WithPrefix(redisAppPrefix(app)), tlsFn)
	if err != nil {
		return check{label, resultFail, err.Error(), redisURLFix}
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	return ask(ctx, s)
}

// permissionsRow judges what CheckPermissions returned.
func permissionsRow(label, rawURL, name string, err error) check {
	user := urlUser(rawURL)
	switch {
	case err == nil:
		detail := fmt.Sprintf("this user may run every command baton sends for lock %q (redisstore.ACLRules)", name)
		if strings.HasPrefix(rawURL, "redis+cluster") || strings.HasPrefix(rawURL, "rediss+cluster") {
			detail += "; asked one cluster node: ACL users are set node by node, so give every node the same rules"
		}
		return check{label, resultPass, detail, ""}
	case errors.Is(err, errors.ErrUnsupported):
		return check{label, resultWarn, "cannot tell whether this user may run every command baton sends: " + err.Error(),
			"an administrator (a user allowed to run ACL commands) runs: " + adminCLI(rawURL) + " ACL GETUSER " + user +
				"\nand compares its rules with redisstore.ACLRules: " + redisstore.ACLRules}
	case errors.Is(err, backend.ErrForbidden):
		cause, _ := diagnose(err)
		return check{label, resultFail, cause + ": " + err.Error(),
			"an administrator (a user allowed to run ACL commands) adds the rules baton needs (redisstore.ACLRules), then keeps them with ACL SAVE or CONFIG REWRITE:\n" +
				adminCLI(rawURL) + " ACL SETUSER " + user + " " + shellRules(redisstore.ACLRules)}
	}
	return redisFailure(label, err)
}

// roleCheck asks the server of a redis:// or rediss:// URL whether it is
// a primary outside a Cluster (INFO replication and cluster), the only
// server such a URL can lock on: a replica refuses every acquisition
// (READONLY), and a Cluster node answers only for the locks whose hash
// slot it serves (MOVED for the others, and for its own after a failover
// or resharding), which reading one lock, as the store row does, does not
// show. It also fails a primary that refuses writes for want of replicas
// (min-replicas-to-write), which reads answer too. ok is false for a
// Sentinel or Cluster URL, whose client finds the primaries itself.
func roleCheck(ctx context.Context, rawURL string, tlsFn redisstore.Option) (_ check, ok bool) {
	if strings.Contains(strings.SplitN(rawURL, "://", 2)[0], "+") {
		return check{}, false
	}
	shown := redactURL(rawURL)
	label := "role " + shown
	client, err := questionClient(rawURL, tlsFn)
	if err != nil {
		return check{label, resultFail, err.Error(), redisURLFix}, true
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	info, err := client.Info(ctx, "replication", "cluster").Result()
	switch {
	case infoRefused(err) != "":
		return check{label, resultWarn, "cannot tell whether the server is a primary: " + infoRefused(err),
			fmt.Sprintf("an operator runs: redis-cli -u %s INFO replication\nand looks for role:master, and in INFO cluster for cluster_enabled:0; a replica refuses every lock, and a Cluster node needs a redis+cluster:// URL", shown)}, true
	case err != nil:
		return redisFailure(label, err), true
	}
	if role, _ := infoField(info, "role"); role == "slave" {
		of := ""
		if host, ok := infoField(info, "master_host"); ok {
			port, _ := infoField(info, "master_port")
			of = " of " + net.JoinHostPort(host, port)
		}
		return check{label, resultFail, replicaDetail(ctx, client, of),
			"give the primary's address, or, if Sentinel manages it, a redis+sentinel://S1:26379,S2:26379,S3:26379/PRIMARY URL, which follows failovers"}, true
	}
	if c, _ := infoField(info, "cluster_enabled"); c == "1" {
		return check{label, resultFail, "the server is a Redis Cluster node (INFO cluster: cluster_enabled:1): a client of one server can lock only the names whose hash slot this node serves, and none of them after a failover or resharding moves the slot (MOVED)",
			"give the cluster as redis+cluster://N1:PORT,N2:PORT,N3:PORT (several nodes, every primary ideally)"}, true
	}
	if detail, refusing := writesRefused(ctx, client, info); refusing {
		return check{label, resultFail, detail,
			"start or reconnect replicas until enough are in sync (INFO replication: min_slaves_good_slaves), or lower min-replicas-to-write (CONFIG SET min-replicas-to-write N, then CONFIG REWRITE; on a managed service, its parameter group)"}, true
	}
	return check{label, resultPass, "the server is a primary (role:master), not a Cluster node", ""}, true
}

// replicaDetail says what a replica (of its primary, of) does to locks:
// a read-only one refuses every acquisition; a writable one
// (replica-read-only no, which CONFIG GET shows, if allowed) takes them,
// but keeps them to itself, and its next full resynchronisation erases
// them while their holders still run.
func replicaDetail(ctx context.Context, client *redis.Client, of string) string {
	vals, err := client.ConfigGet(ctx, "replica-read-only").Result()
	if err == nil && vals["replica-read-only"] == "no" {
		return "the server is a writable replica" + of + " (INFO replication: role:slave; replica-read-only no): it grants locks that its primary and the processes locking there never see, and its next full resynchronisation erases them while their holders still run"
	}
	return "the server is a read-only replica" + of + " (INFO replication: role:slave): every acquisition is refused (READONLY)"
}

// writesRefused reports whether the primary that answered INFO
// replication with info refuses every write (NOREPLICAS), for fewer
// replicas in sync than its min-replicas-to-write, and says so: every
// acquisition and renewal then fails, though reads answer. INFO shows the
// replicas in sync (min_slaves_good_slaves) only when that setting is on,
// so at least 1; the setting itself needs CONFIG GET, which may be refused.
func writesRefused(ctx context.Context, client *redis.Client, info string) (string, bool) {
	v, ok := infoField(info, "min_slaves_good_slaves")
	good, err := strconv.Atoi(v)
	if !ok || err != nil {
		return "", false
	}
	want, shown := 1, "at least 1" // the setting is on
	if vals, err := client.ConfigGet(ctx, "min-replicas-to-write").Result(); err == nil {
		if n, err := strconv.Atoi(vals["min-replicas-to-write"]); err == nil {
			want, shown = n, strconv.Itoa(n)
		}
	}
	if good >= want {
		return "", false
	}
	return fmt.Sprintf("the server refuses every write (NOREPLICAS): min-replicas-to-write is %s, and %d replicas are in sync (INFO replication: min_slaves_good_slaves:%d); every acquisition and renewal fails until enough are", shown, good, good), true
}

// persistenceCheck asks the server at rawURL for INFO persistence and, if
// the append-only file is on, for its appendfsync setting.
func persistenceCheck(ctx context.Context, rawURL string, tlsFn redisstore.Option) check {
	shown := redactURL(rawURL)
	label := "persistence " + shown
	if err := redisstore.CheckURL(rawURL); err == nil && strings.Contains(strings.SplitN(rawURL, "://", 2)[0], "+") {
		// A Sentinel or Cluster URL names sentinels or seeds, not every
		// data node: this row does not ask them one by one.
		return check{label, resultWarn, "cannot tell from a Sentinel or Cluster URL whether every data node keeps the locks across a restart",
			"on each primary and replica an operator runs: redis-cli -h HOST -p PORT INFO persistence\nand looks for aof_enabled:1 and appendfsync always. Otherwise: " + aofFix}
	}
	client, err := questionClient(rawURL, tlsFn)
	if err != nil {
		return check{label, resultFail, err.Error(), redisURLFix}
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()

	info, err := client.Info(ctx, "persistence").Result()
	switch {
	case infoRefused(err) != "":
		return check{label, resultWarn, "cannot tell whether a restart keeps the locks: " + infoRefused(err),
			fmt.Sprintf("an operator runs: redis-cli -u %s INFO persistence\nand looks for aof_enabled:1; then: redis-cli -u %s CONFIG GET appendfsync\nshould say always. Otherwise: %s", shown, shown, aofFix)}
	case err != nil:
		return redisFailure(label, err)
	}
	aof, ok := infoField(info, "aof_enabled")
	switch {
	case !ok:
		return check{label, resultWarn, "cannot tell whether a restart keeps the locks: INFO persistence has no aof_enabled field", aofFix}
	case aof != "1":
		return check{label, resultWarn, fmt.Sprintf("append-only file off (aof_enabled:%s): a restart or crash frees every held lock while its holder still runs (tokens keep growing, from the server's clock)", aof), aofFix}
	case aofRewriting(info):
		return check{label, resultWarn, "append-only file on (aof_enabled:1), but being rewritten: if appendonly was just switched on (CONFIG SET appendonly yes), the file holds no lock until the rewrite ends, and a restart or crash before then frees every held lock while its holder still runs", aofRewriteFix}
	}
	return appendfsyncCheck(ctx, client, label, shown)
}

// infoRefused says why the server refused an INFO that failed with err:
// the ACL refused it to the user, or the server has no INFO command (an
// operator disabled or renamed it, as hardened servers do); "" for any
// other error. Neither stops baton's locks, which do not need INFO.
func infoRefused(err error) string {
	switch {
	case redis.IsPermissionError(err):
		return fmt.Sprintf("this user may not run INFO (%v)", err)
	case err != nil && strings.HasPrefix(err.Error(), "ERR unknown command"):
		return fmt.Sprintf("the server has no INFO command, disabled or renamed with rename-command (%v); baton's locks do not need it, only this check does", err)
	}
	return ""
}

// aofRewriting reports whether INFO persistence shows an append-only file
// rewrite in progress or scheduled. Switching the file on at runtime starts
// one, and Redis writes nothing a restart would read until it has ended (a
// server killed during it came back empty); INFO cannot tell that rewrite
// from a routine one.
func aofRewriting(info string) bool {
	for _, field := range []string{"aof_rewrite_in_progress", "aof_rewrite_scheduled"} {
		if v, _ := infoField(info, field); v == "1" {
			return true
		}
	}
	return false
}

// appendfsyncCheck is the row of a server whose append-only file is on:
// it passes with appendfsync always, or when the ACL hides the setting
// (it says so), and warns with any other setting.
func appendfsyncCheck(ctx context.Context, client *redis.Client, label, shown string) check {
	vals, err := client.ConfigGet(ctx, "appendfsync").Result()
	fsync := vals["appendfsync"]
	switch {
	case redis.IsPermissionError(err):
		return check{label, resultPass, fmt.Sprintf("append-only file on (aof_enabled:1); this user may not run CONFIG GET, so appendfsync is not known: it must be always (check: redis-cli -u %s CONFIG GET appendfsync)", shown), ""}
	case err != nil:
		return check{label, resultPass, fmt.Sprintf("append-only file on (aof_enabled:1); CONFIG GET appendfsync failed (%v), so appendfsync is not known: it must be always", err), ""}
	case fsync == "always":
		return check{label, resultPass, "append-only file on (aof_enabled:1), appendfsync always: every acknowledged write survives a restart", ""}
	}
	return check{label, resultWarn, fmt.Sprintf("append-only file on, but appendfsync %s: a crash can lose the last writes, so a claim can vanish while its holder still runs (tokens keep growing, from the server's clock)", fsync), aofFix}
}

// redisFailure is the row of a server that did not answer INFO: the
// cause first.
func redisFailure(label string, err error) check {
	if redis.IsAuthError(err) {
		return check{label, resultFail, "the server refused the credentials: " + err.Error(),
			"give the user and password of a Redis user in the URL: redis://user:password@host:port"}
	}
	err = storeerr.Classify(err)
	cause, fix := diagnose(err)
	return check{label, resultFail, cause + ": " + err.Error(), fix}
}

// urlUser returns the user a Redis URL names, or default, the user of a
// URL that names none. Only what precedes the host is parsed: a Sentinel
// or Cluster URL's host may be a list of IPv6 addresses, which url.Parse
// refuses (and the fix would then name the default user).
func urlUser(rawURL string) string {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return "default"
	}
	if u, err := url.Parse(scheme + "://" + rest[:at] + "@host"); err == nil && u.User.Username() != "" {
		return u.User.Username()
	}
	return "default"
}

// adminCLI is the redis-cli command line an administrator runs ACL
// commands with on the server of a redis:// URL (host and port left to
// fill in for a Sentinel or Cluster URL, whose data nodes it does not
// name).
func adminCLI(rawURL string) string {
	host, port := "HOST", "PORT"
	if u, err := url.Parse(rawURL); err == nil && (u.Scheme == "redis" || u.Scheme == "rediss") && u.Hostname() != "" {
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = "6379"
		}
	}
	cli := "redis-cli -h " + host + " -p " + port
	if strings.HasPrefix(rawURL, "rediss") {
		cli += " --tls"
	}
	return cli + " --user ADMIN --askpass"
}

// shellRules quotes the ACL rules that a shell would expand (~baton:*) or
// act on (&baton:*), so that the fix can be pasted as it is.
func shellRules(rules string) string {
	fields := strings.Fields(rules)
	for i, r := range fields {
		if strings.ContainsAny(r, "*&~%|") {
			fields[i] = "'" + r + "'"
		}
	}
	return strings.Join(fields, " ")
}

// infoField returns the value of a field of an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
