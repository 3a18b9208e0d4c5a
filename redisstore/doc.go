// Package redisstore provides baton backends on Redis: Store, on one Redis
// server (or a Redis Cluster), and Redlock, on several independent servers.
// Both use github.com/redis/go-redis/v9 clients. They need Redis 5 or later
// (the scripts read the server's TIME before writing, which needs effect
// replication); the tests run against Redis 7.
//
//	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	defer client.Close() // New does not own the client: close it after the Store
//	store, err := redisstore.New(client)
//	if err != nil { ... }
//	defer store.Close()
//	mu, err := baton.NewMutex(store, "nightly-report")
//
// Without ContextTimeoutEnabled, go-redis ignores the deadlines of the
// contexts baton passes: against a server that does not answer, a Lock or
// an Unlock given a 500 ms deadline returns only when the client's own
// timeouts run out (5 s with go-redis's defaults; see Connections). Open
// and ParseURL set it.
//
// # What the backend does, and what the engine does
//
// The backend performs atomic operations only: each of acquire, renew,
// release, force-release, remove and get is one Lua script, which Redis
// runs without interleaving any other command. Timing is the engine's (package
// baton): the holder counts its validity from the send time of its last
// successful acquire or renew on its own monotonic clock, and steps down
// before the claim can expire in Redis. Redis starts a claim's TTL when it
// runs the script, which is after that send time, and expires it by its own
// clock; no clock of one machine is ever compared with another's.
//
//   - Acquire: if the lock key is absent, increment the lock's fencing
//     counter, write the claim (holder, nonce, token, TTL, times) and set its
//     expiry (PEXPIRE, the TTL rounded up to whole milliseconds), all in one
//     script, so a crash can never leave a claim without expiry (the
//     SETNX-then-EXPIRE bug). If the key is present, report the holder and
//     the claim's remaining time (HeldError.RetryAfter), from the fence,
//     which keeps the holder, token and expiry beside the key.
//   - Renew: if holder and nonce match, set the expiry to the TTL again
//     (and record it in the fence); otherwise backend.ErrLost. A lock key
//     that is gone is never written again by a renew.
//   - Release: if holder and nonce match, delete the claim, keep the
//     counter, and PUBLISH a release notice (acquire publishes one too, for
//     watchers that follow the holder); otherwise backend.ErrLost. The
//     check and the delete are one script (never DEL without an owner
//     check).
//   - Fair handover: a waiter that has a watch open (baton.Mutex.Lock)
//     takes a place in a FIFO kept next to the lock, and a release hands
//     the lock to the longest-waiting waiter in the same script: so a
//     holder that unlocks and locks again in a tight loop cannot starve
//     the others. See "Direct handoff" below and WithHandoverWindow.
//   - Watch: a waiter subscribes to the lock's notice channel and to a
//     handoff channel (see "Direct handoff") and retries as soon as a
//     notice arrives. A blocking Lock's watch (WatchWaiter) wakes only
//     for notices it can use: a handoff to its holder, a release that
//     hands the lock to nobody, or the end of a reservation for another
//     waiter (see WithHandoverWindow); acquisitions and
//     handoffs to others do not wake it. So a release wakes one waiter,
//     not all of them to be refused. The engine still polls (RetryPeriod,
//     with jitter, and no later than the PTTL the holder's claim had left)
//     in case a notice is lost, and a claim that expires (its holder
//     crashed) publishes nothing. A waiting attempt right after a refused
//     one is answered from that answer, without a request, if the Store
//     has followed the lock's channels since before the refused attempt,
//     heard no notice on them since other than handoffs to other waiters,
//     and the claim then seen cannot have ended (its PTTL from the
//     attempt's send time): the engine's retry after its watch opens
//     costs nothing. Such an answer can be older than a notice still in
//     flight to the Store; the notice wakes the watch when it arrives. A
//     handoff to another waiter is not sent to a Store that only waits
//     (see "Direct handoff"): after one, the answer may name the holder
//     the refused attempt saw, which has handed the lock on; a Store that
//     also watches the lock (Watch) names the new holder and token, with
//     the new claim's TTL counted from the attempt's send time (the
//     release ran after the attempt).
//
// # Direct handoff
//
// The place of a waiter that says it waits (backend.Request.Waiting: a
// Lock call or a campaign, whose attempts all present one nonce) records
// its owner (holder and that nonce) and its TTL. A release serves the longest-waiting live
// waiter other than the releaser: it writes that waiter's claim as an
// acquisition by it would (the next token, the claim with the waiter's TTL
// from the script's start, the fence), and publishes "handed" on the
// waiter's holder's handoff channel, which only the Stores waiting as that
// holder follow, and on the lock's handoff channel, which Watch follows
// (see "Key layout"). The waiter's Store returns the claim at the waiter's
// next attempt (the watch wakes it at once) without a request: a handover
// is one script and one notice, received by the Store it is for. (On the
// notice channel, which every waiting Store follows, eight waiters' Stores
// would each receive every handover: TestContendedCPU in bench measures
// what that costs.)
//
// The clock model holds (DESIGN invariant 3). The waiter's Store counts
// the claim from the send time of the waiter's last attempt, which Redis
// refused before the release (its answer named an older token), and says
// so in the grant (backend.Grant.Age): the engine counts the holder's
// validity from its own send time minus that age, which is at or before
// the refused attempt's send time. The release ran later and gave the claim
// the full TTL from then, so Redis keeps it at least as long as the holder
// counts it valid. A waiter whose last attempt is older than a third of
// its TTL (it slept long while the holder worked), or whose Store missed
// the notice, collects the claim with its next attempt's script instead,
// which counts the TTL from that attempt's send time as for a new claim;
// the fence's handed field lets that script collect a claim handed to the
// attempt's owner once.
//
// An acquire whose context ends after its script was sent may still have
// been run by Redis, which does not know that nobody reads the reply: the
// Store then releases the claim it may have written (owner-checked, in the
// background, for at most 2 s; Close waits for it), so that a TryLock cut
// short by its deadline, or a Lock given up as its process shuts down,
// does not keep the lock from everyone until its TTL.
//
// A waiter's place lasts until its next attempt is due, plus a third of
// its TTL for that attempt to arrive late: its refusal tells it to retry
// when the claim it saw can first end, and its watch wakes it earlier
// only for a handoff to it, so a waiter with a TTL shorter than the
// holder's asks again only after its own TTL has passed. The place lasts
// at least one TTL of the waiter's own. (Until 2026-12-07 it lasted one
// TTL exactly: such a waiter lost its place to the waiters behind it,
// TestFIFOPlaceLastsUntilRetry.) A waiter that stopped asking is dropped
// by the first release after its place ran out.
//
// A waiter that gives up (its context ends) drops its place, and if the
// lock was handed to it and not collected, releases it to the next waiter,
// in one script from its Store. That script is sent in the background:
// Lock (or an Elector's Run) returns without waiting for it, and Close
// waits for it (at most 2 s). Close the Store before the process exits: a
// standby stopped by SIGTERM that exited (os.Exit) right after its Run
// returned, without Close, kept its place in 4 of 6 runs, and the leader's
// next release handed the lock to it, so the other standby took over only
// after the TTL. A waiter whose process dies is handed the
// lock at most once, and holds it up for at most its TTL, like a holder
// that dies. Two goroutines of one holder identity share one place; the
// lock is handed to the owner (nonce) of the later attempt. With
// WithReplicaAcks the lock is not handed over: the notice would reach the
// waiter before a replica acknowledged the claim, so a release reserves
// the lock for the waiter instead, which then acquires it with a request
// (see WithHandoverWindow); so does a release for a waiter of an earlier
// version, and for one queued only because a watch was open (a
// Semaphore's slot: each of its attempts has a new nonce), whose places
// record no owner. (A reservation made by an earlier
// version's release is not recorded in the fence, and an acquisition that
// finds the fence free does not look for it: while versions are mixed,
// such a reservation may be overtaken. Exclusion and tokens do not depend
// on reservations.) An earlier version's Store follows the notice channel
// only: while versions are mixed, its watches are not woken by a handoff
// between two waiters of this version, and it learns of the new holder at
// its next poll (RetryPeriod) or notice.
//
// Ownership is the holder's identity plus the engine's random nonce per
// acquisition, so even two processes misconfigured with the same identity
// cannot renew or release each other's claim.
//
// # Key layout
//
// For a lock named N and the prefix P (default "baton:", see WithPrefix):
//
//	P{N}:lock      string "<token> <ttl ms> <acquired ms> <nonce length>
//	               <nonce><holder>", written with its expiry (SET PX).
//	               Exists only while a claim is live; expires with it.
//	               A renewal moves the expiry only: the last one was
//	               TTL - PTTL before the server's now.
//	P{N}:fence     hash: token (the last fencing token issued),
//	               transitions, holder (the last holder; "" after a release),
//	               expires (the server time, in ms, at which the last claim
//	               ends; "0" after a release), handed (the token of the last
//	               claim a release handed to a waiter, until collected by a
//	               request), reserved (the server time, in ms, at which the
//	               last reservation ends), attempt and released (the
//	               random ids of the last acquisition and release, so
//	               that go-redis sending one again after its connection
//	               broke, the first run done, takes the claim that run
//	               wrote, or answers as released). Never expires;
//	               only Remove deletes it (see "Removing a lock").
//	P{N}:notify    pub/sub channel: a message per acquire and per release:
//	               "acquired <token>", "released <token>", when the release
//	               reserved the lock for a waiter "released <token>
//	               <window ms> <waiter>", or when it handed the lock to an
//	               earlier version's waiter "handed <token> <ttl ms>
//	               <owner>".
//	P{N}:handoffs  pub/sub channel: "handed <token> <ttl ms> <owner>" when
//	               a release handed the lock to a waiter of this version.
//	P{N}:handoffs:<holder>
//	               pub/sub channel: the same notice, when the waiter is
//	               holder's.
//	P{N}:queue     list: the FIFO of waiting holder identities.
//	P{N}:queued    hash: waiting identity -> "0<registration deadline ms>
//	               <ttl ms> <owner>" (the leading zero: the waiter's Store
//	               follows P{N}:handoffs:<holder>; without it from an
//	               earlier version, which follows P{N}:notify; the deadline
//	               alone from still earlier versions and with
//	               WithReplicaAcks).
//	P{N}:next      string: the waiter a released lock is reserved for.
//	               The last three expire on their own (see
//	               WithHandoverWindow).
//
// The lock name in braces is a Redis Cluster hash tag: all keys of a lock
// live in one slot, as a script on a cluster requires. Lock names are validated with
// backend.ValidateName and never contain braces.
//
// A key of another type, a lock value that does not parse, a fence without
// its numeric fields or a lock key without expiry is reported as
// backend.ErrCorruptRecord and never overwritten:
// overwriting could reset the fencing counter. Inspect it and remove it by
// hand. Removing the fence key loses the lock's counter: the next token is
// then the server's clock in microseconds (see "Fencing tokens"), which is
// larger than the earlier tokens only if the clock has passed the counter.
// It has, unless the clock went back (or, under Redlock, the counter was
// raised to another server's clock, ahead of this one's); Store.Remove
// checks it before it deletes a fence (see "Removing a lock").
//
// # A lock key deleted while held
//
// Deleting P{N}:lock by hand (DEL, UNLINK, a clean-up job, an eviction)
// while its claim is live does not free the lock early. The holder learns
// of it at its next renew, which fails with backend.ErrLost, and works until
// then; so the acquire script refuses, as if the claim were still there
// (HeldError naming the last holder and token, RetryAfter the time left),
// until the expiry recorded in the fence has passed on the server's clock.
// This covers every contender, including processes that never saw the
// claim. The fencing counter is in the fence, so the next token is larger
// all the same. To free such a lock at once, force-release it (baton
// release NAME --force, Store.ForceRelease), which clears the recorded
// expiry; it is also the sanctioned way to free a live claim. Deleting the
// fence key as well loses both the expiry and the counter (see "Fencing
// tokens"), and so do FLUSHDB and FLUSHALL, which delete every key of the
// lock: as after a restart without persistence, the lock is free at once,
// another process can take it while the holder works on until its next
// renew (a third of the TTL later) fails, and only fencing holds (the next
// token follows the server's clock).
//
// # Removing a lock
//
// A lock name used once (package schedule locks each run of a job under a
// name of its own) leaves its fence behind for ever, and its queue keys
// until they expire. Store.Remove deletes all five keys of the lock (lock,
// fence, queue, queued, next) in one script, if and only if nothing on
// the lock is live; otherwise it deletes nothing and returns an error
// matching backend.ErrHeld, whose HeldError names what refused it as an
// acquisition's refusal would:
//
//   - the lock key exists: a claim, or a claim a release handed to a
//     waiter that has not collected it yet;
//   - the fence records a claim whose expiry has not passed on the
//     server's clock (its key deleted by hand, see above);
//   - the lock is reserved for a waiter (next);
//   - a waiter's place has not run out (the deadline its last attempt
//     set: when its next attempt is due, at least one TTL of its own
//     after it, and a third of its TTL more; see "Direct handoff").
//     Places that ran out go with the rest.
//
// A claim that expired without a release is not live, and is removed: the
// server judged its expiry, as it does for every contender. A key of
// another type, a corrupt lock value or fence, or a fence without a token
// field is reported as backend.ErrCorruptRecord, and nothing is deleted.
//
// The next acquisition creates the keys anew, and its token is the
// server's clock in microseconds (see "Fencing tokens"): there is no
// counter left to add to. So that it is larger than every token issued
// before, Remove deletes the fence only while its counter is below the
// server's clock, and otherwise fails (keeping every key) until the clock
// has passed the counter. The next token is then larger under the
// assumption that tokens after a restart need: the server's clock does not
// go back after the removal by more than the time between the last token
// and the removal (NTP slews; a clock stepped back can repeat tokens). A
// contender that saw the lock before has nothing to wait out after a
// removal: the server, not the contender, judges claims here.
// Redlock.Remove runs Store.Remove on every server (see Redlock).
//
// # Fencing tokens, persistence and restarts
//
// A token is the fence key's counter plus one, or the server's clock
// (TIME) in microseconds if that is larger; the counter (which only
// acquisitions, handoffs and Redlock's raise step change, and only Remove
// deletes: see "Removing a lock") then takes the token. So tokens strictly
// increase while the server keeps its data, and also when it loses the
// counter (a restart without durable persistence, a promoted replica that
// missed the last writes), under one assumption: the clock of the server
// that issues the next token has not gone back, since the last token was
// issued, by more than the outage lasted (NTP slews; a clock stepped back
// an hour can repeat tokens).
// Tokens are therefore large numbers (about 1.8e15 in 2026, below 2^53,
// which Lua keeps exact, until the 23rd century). Claims are another
// matter; whether a server keeps them depends on its configuration:
//
//   - appendonly yes, appendfsync always: every acknowledged write is on
//     disk before the reply. After a restart, claims and counters are back
//     (a claim keeps its absolute expiry time, so one that ran out during
//     the downtime is gone). This is the configuration to use for locks.
//   - appendonly yes, appendfsync everysec (Redis's default with AOF): a
//     crash can lose the last second of writes: a claim can vanish, so a
//     second holder can acquire while the first still runs; its token is
//     larger (the clock), so a resource that checks tokens refuses the
//     first holder's later writes (TestTokensAfterLostWrites).
//   - no persistence, or RDB snapshots only: a restart loses every claim and
//     every counter. A lock held during the restart becomes free at once,
//     so another process can acquire it while the old holder still runs;
//     the old holder's next renew fails with backend.ErrLost and its lease's
//     context ends, but only then. The new holder's token is larger than
//     the old one's (TestRestartWithoutPersistence): fencing holds, the
//     lock does not.
//
// # Memory limit and eviction
//
// A server at its maxmemory evicts keys by its maxmemory-policy, whatever
// they hold. Under noeviction, or with no limit, nothing is evicted: at
// the limit an acquisition fails with OOM (backend.ErrUnavailable) until
// memory is freed, while holders keep renewing (Redis refuses a script
// only at a first write that may need memory, and a renewal's first is
// PEXPIRE). Under a volatile-* policy only keys that expire are evicted:
// a lock's key (a claim expires) and its queue, never its fence, so an
// evicted claim is a claim deleted by hand (above): its holder loses the
// lock early, and nobody else acquires it before the claim could have
// expired. Under an allkeys-* policy, the one a cache usually runs, the
// fence can go with the key, and another process can then take a lock that
// is still held (tokens still increase: the server's clock). Keep locks
// on a Redis that evicts nothing; Store.MemoryPolicies reads each
// primary's limit and policy, and `baton doctor` fails an allkeys-* policy
// and warns of a volatile-* one.
//
// # Topologies
//
// Open (and the CLI's --redis-url) takes, beside redis:// and rediss://:
//
//	redis+sentinel://[user:password@]S1:26379,S2:26379,S3:26379/PRIMARY[/DB][?sentinel_password=P[&sentinel_username=U]]
//	redis+cluster://[user:password@]N1:7000,N2:7000,N3:7000
//
// The first names the sentinels and the name under which they monitor the
// primary (`sentinel monitor PRIMARY ...`); the client asks them for the
// primary and follows failovers. IPv6 addresses are written in brackets,
// as in any URL: redis+cluster://[fd00::1]:7000,[fd00::2]:7000. The second names several cluster nodes
// (every primary, ideally: one is refused, so that the client finds the
// cluster while a node is down); every lock's keys share a hash slot. The
// rediss+ forms use TLS, to the sentinels as to the servers, with the
// system's roots, or with a private CA and a client certificate given
// with WithTLSFiles (the CLI's --cacert, --cert and --key;
// TestTLSFilesTopologies). user and password are the
// data nodes' ACL credentials; sentinels that require a password of their
// own (requirepass, or an ACL user) take it as sentinel_password (and
// sentinel_username), and without it their refusal is
// backend.ErrForbidden naming the parameter (TestSentinelAuth). Messages
// show URLs through RedactURL. A URL with no primary name, a cluster given
// one node, a replica's address given as a plain redis:// URL (its writes
// fail with READONLY: backend.ErrMisconfigured, not retried) and a
// sentinel's (it runs no scripts: ErrMisconfigured too) are refused with
// an error that says so. Through a Sentinel or Cluster client, READONLY
// means the primary the client followed was demoted (a failover, or
// REPLICAOF by hand) and the client has not yet learnt of the new one:
// backend.ErrUnavailable, retried until the sentinels (their
// +switch-master) or the cluster's map of the slots name it
// (TestSentinelPrimaryDemotedByHand: about 20 s, the sentinels' detection
// of a primary that reports itself a replica). The conformance suite runs on both
// topologies (TestConformanceSentinel: a primary, a replica and three
// sentinels; TestConformanceCluster: three primaries), and
// TestSentinelFailover acquires through the same Store after the primary
// is killed and the replica promoted.
//
// go-redis's FailoverClient asks one sentinel for the primary when it
// dials, and listens to that sentinel's +switch-master only; it drops its
// connections to the old primary when it hears the switch or dials
// again. If that sentinel dies and the others then fail over while the
// old primary runs (SENTINEL FAILOVER, or a primary cut off from the
// sentinels only), the old primary stays writable until the sentinels
// demote it, about 10 s after the switch (they wait 8 s for a former
// primary to report its new role), and a client that did not hear the
// switch writes there while others write to the new primary: two
// holders. So a Store opened on a redis+sentinel:// URL also subscribes
// to +switch-master on every sentinel of the URL (one pub/sub connection
// each, no request per operation), and on a switch of its primary makes
// its client resolve the primary again, through another sentinel if its
// own is dead, until it reaches the announced address (for at most
// 30 s), then moves its watches' subscriptions to the new primary. It
// then wrote to the new primary 0.2 s after the switch, not for the 10 s
// until the demotion (TestSentinelFailoverAfterSubscribedSentinelDies);
// and a waiting Lock heard a release on the new primary, where its
// subscription used to stay on the old one, which hears the new one's
// notices only once demoted (TestSentinelFailoverWaiterHearsRelease:
// the waiter answered its attempts from the refusal it had seen until
// then). A failover is never
// instantaneous: what remains is that time from the switch (up to about
// 2 s if the sentinel asked has not yet learnt of it: sentinels share
// their configuration every 2 s), requests already in flight on the old
// connections, and, for a Store that reaches no sentinel, the whole time
// the old primary stays writable. A Store made with New on a
// FailoverClient you build has no such watch (its waiters may then wait
// for the old primary's demotion). Fencing covers the rest:
// tokens follow the servers' clocks (see "Fencing tokens"), so the two
// holders' tokens differ and a resource that checks them refuses the
// smaller one's writes once it has seen the larger.
//
// Replication does not make locks safe: Redis replicates asynchronously,
// so a failover (Sentinel, Cluster) can promote a replica that never
// received an acquisition or a renewal. The same lock can then be acquired
// twice while the first holder works until its next renew; tokens still
// grow (they follow the server's clock, see Fencing tokens), so fencing
// holds. WithReplicaAcks makes each acquisition and renewal wait for n
// replicas' acknowledgement (WAIT), so that a failover loses a claim only
// with those replicas; it narrows the window (a replica can still lose an
// acknowledged write in a crash of its own) but does not close it: WAIT is
// not consensus. The safety suite's TestSafetyRedisAmnesia rows run a
// Sentinel and a Cluster failover. Where a lock must survive a store failure
// with its guarantees, use the etcd or Kubernetes backends, whose writes
// are committed by consensus; Redlock (below) spreads the risk over
// independent servers but has weaker tokens.
//
// Redis expires keys by its own wall clock. A server whose clock is stepped
// forward (an administrator, NTP in step mode) expires claims early and can
// hand a lock to a second holder while the first still counts itself
// valid. Keep server clocks slewed, never stepped.
//
// # Connections
//
// AUTH (ACL user and password), TLS and the database number are go-redis
// client options; ParseURL, Open and OpenURLs take them from a URL such as
// rediss://user:password@host:6380/2; WithTLSFiles gives a private CA and
// a client certificate, and WithClientOptions adjusts the rest. Set ContextTimeoutEnabled on
// clients you build yourself, so that the engine's context deadlines bound
// every call; ParseURL does. go-redis retries a command after some network
// errors; an acquire or release retried after it had in fact run knows its
// first run by the call's id in the fence (see Key layout), and takes the
// claim that run wrote, or answers as released.
//
// With ACLs, a user needs ACLRules: the connection commands a client sends
// (and CLUSTER SLOTS on a Cluster), EVALSHA/EVAL, SUBSCRIBE, SCAN, WAIT
// (WithReplicaAcks) and the commands the scripts run, on baton's keys
// (~baton:*) and channels (&baton:*) only. Store.CheckPermissions asks a
// server (Redis 7 or later) whether the Store's user may run each of them
// on a lock's keys and channels, and names those it may not, and those the
// server lacks (disabled or renamed with rename-command). A script refused
// at a command it calls fails with ErrForbidden (the ACL) or
// ErrMisconfigured (a command the server lacks), naming them, and an
// acquisition so refused releases the claim it wrote before. A refused
// SUBSCRIBE fails Watch the same way, and a waiting Lock then polls.
//
// A Store opened on a redis+sentinel:// URL keeps one pub/sub connection
// to each sentinel of the URL (see "Topologies"). Every Store keeps one
// pub/sub connection for its watches, while any lock
// was watched within the last minute (WithWatchLinger). Close stops it.
//
// A Store cannot work through twemproxy (nutcracker): it closes a
// client's connection at HELLO, which go-redis v9 sends first on every
// connection, and it lacks the pub/sub, SCAN, INFO and WAIT that baton
// uses; with auto_eject_hosts it moves a lock's keys to a server that never
// saw them, so a second holder can take a held lock. A client that Open
// or NewClient made recognises such a proxy (it answers PING and closes
// at HELLO) and fails with backend.ErrMisconfigured naming it; give baton
// the Redis servers' own addresses (docs/backends.md, "Redis behind
// twemproxy").
//
// A connection that a middlebox dropped silently (a NAT or firewall that
// forgot the flow) answers nothing and reports nothing; go-redis gives up
// on it only at its ReadTimeout (5 s by default: with the default timings,
// all the time a renewal has before the renew deadline). So a renewal
// with no answer after a ninth of its TTL is sent again beside it, on
// another connection, and the first answer wins: a holder keeps its lock
// across a dropped connection (TestHolderConnectionDropped). A Store's
// pub/sub connection is pinged when quiet for 3 s and replaced when a
// ping has no answer for another 3 s: a waiting Lock whose connections
// were all dropped 1 s before the holder released (TTL 15 s) acquired 9 s
// after the release.
//
// # Many locks
//
// Every held lock is renewed every TTL/3 (the engine's default): 0.2
// renewals a second per lock at the default 15 s TTL, 2,000 a second for
// 10,000 locks. A Store group-commits them. A Renew joins the pending
// batch, which is sent at once if the Store sent no batch in the last
// 20 ms, and otherwise when those 20 ms have passed, with every renewal
// that arrived meanwhile. So a Store sends at most 50 batches a second
// whatever the number of locks, a lock renewed alone is sent at once, and
// no renewal waits more than 20 ms. On one server (or a Sentinel primary)
// a batch is one script per 250 locks (about 6 µs of server time per lock;
// the scripts of a batch go in one pipeline, and the server serves other
// clients between them). The scale report in docs/benchmarks.md measures
// the requests at 10,000 held locks against a target of 100 a second: on
// one server, 13.6 requests a second for 2,000 renewals a second, every
// lock renewed on time and none lost (2,000 requests a second before
// batching). Locks taken together are renewed together, so their
// renewals share windows and a Store sends far fewer than 50 batches a
// second.
//
// Batching changes no outcome. The batch script runs the single-lock
// renewal's checks and writes for each lock in turn (owner, expiry, the
// fence's recorded expiry, corrupt records), each under pcall, and answers
// each caller with what renewing its lock alone would have: renewed, lost
// to a named holder, lost and free, or a corrupt record, which fails that
// lock only. Nor does it weaken validity: the engine counts a renewal's
// validity from the send time it read before calling Renew, so the wait
// for the batch comes out of the renew deadline, never out of the claim's
// lifetime in Redis.
//
// A batch runs under a context of its own, not any caller's (one caller
// giving up must not fail the others): it ends when the Store is closed,
// or at the longest TTL in the batch from its sending (a renewal arriving
// later is worthless: its holder has stepped down), or at the latest
// caller's deadline if every caller has one and it is sooner; go-redis's
// read and write timeouts apply beneath it. A caller whose context ends
// before its batch is sent leaves the batch and gets the context's error;
// one whose context ends after that returns the context's error at once,
// and its renewal may or may not have been applied (for the engine it
// failed, which is safe). Close fails the renewals still waiting with an
// error matching backend.ErrClosed (their Leases are then lost), cancels
// the batches in flight and waits for them. The batching runs no goroutine while nothing is
// pending: a timer while a batch waits for its window, and one goroutine
// per batch in flight.
//
// On a Redis Cluster a script may only touch the keys of one hash slot,
// and every lock name is its own hash tag, so two locks rarely share a
// slot: a batch there is one script per slot, sent in one pipeline that
// the client splits per node. On a Cluster batching saves round trips and
// client work, not commands: the server runs about one script per
// renewal, as without batching. On a Ring (sharded by key) every lock is
// its own script in the pipeline. With WithReplicaAcks, the scripts for
// one server run on one connection followed by one WAIT, which covers
// them all; a renewal that fewer replicas acknowledged fails, as without
// batching. Redlock batches too: each of its servers' renewals are
// batched on their own.
//
// # Cost
//
// An acquire and a release are one script each: two round trips a cycle,
// like SET NX PX plus a compare-and-delete script, but the scripts do more
// (the fence, the record fields, the FIFO, the notices): about 14 µs of
// server time a cycle against about 2 µs. Over loopback that is visible;
// over a network round trip of a few hundred microseconds or more it is
// not. See bench/ in the repository for figures.
package redisstore
