package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
const DefaultPrefix = "baton:"

// ACLRules are the Redis ACL rules a user needs for the default prefix
// (for another prefix, change the key and channel patterns):
//
//	ACL SETUSER locker on >password ~baton:* &baton:* +hello +auth ...
//
// They allow the connection commands a client sends (HELLO, AUTH, SELECT
// for a database other than 0, PING; ASKING and CLUSTER SLOTS on a Redis
// Cluster), the scripts, SCAN (List), pub/sub for Watch, WAIT for
// WithReplicaAcks, and the commands the scripts run, on baton's keys and
// channels only. SCAN is the
// exception: key patterns do not limit it, so it lists the names (not the
// values) of every key of the database; without +scan everything but List
// (baton status without a lock name) works, and CheckPermissions names
// SCAN as refused. Rules copied before
// +rpop was added lack it: with them, an acquire that finds 1024 waiters
// queued already fails with ErrForbidden; add +rpop. Rules copied before
// +cluster|slots was added had +@connection instead of the connection
// commands: that category also allows CLIENT KILL, CLIENT PAUSE and
// CLIENT LIST on every client of the server, which baton never sends, and
// lacks CLUSTER SLOTS, without which no lock can be taken on a Cluster;
// replace it (ACL SETUSER locker -@connection, then these rules). Rules
// copied before +wait was added lack it: with them, WithReplicaAcks fails
// every acquisition with ErrForbidden; add +wait.
const ACLRules = "~baton:* &baton:* +hello +auth +select +ping +asking +cluster|slots " +
	"+evalsha +eval +subscribe +unsubscribe +scan +wait " +
	"+type +exists +get +set +del +hset +hget +hmget +hdel +hexists +pexpire +pttl " +
	"+rpush +rpop +llen +lrange +lrem +publish +time"

// Store is a backend.Backend on one Redis server (or a Redis Cluster, through
// a *redis.ClusterClient: the keys of one lock share a hash slot).
// It also implements backend.Watcher and backend.WaiterWatcher (acquire,
// release and handoff notices over pub/sub), backend.Lister,
// backend.ForceReleaser and backend.Remover.
//
// See the package documentation for the key layout, the guarantees and what
// a restart or a failover does to locks and tokens.
//
// Create a Store with New or Open; the zero Store has no client and is not
// usable. Its methods are safe for concurrent use: one Store serves every
// lock, Mutex and goroutine of a process.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	handover time.Duration // 0: no FIFO of waiters
	// handoff: a release hands the lock to the longest-waiting waiter
	// (a FIFO, and no replica acks to wait for); waiters tracks this
	// Store's waiters for it.
	handoff bool
	waiters *waiters
	// acks replicas must acknowledge each acquisition and renewal, within
	// ackTimeout (WithReplicaAcks); 0: no WAIT.
	acks       int
	ackTimeout time.Duration
	hub        *hub
	renews     *renewBatcher        // see Renew
	last       atomic.Pointer[keys] // see keySet
	owned      []io.Closer          // clients that Open created; Close closes them
	closed     atomic.Bool          // set by Close: every method refuses (open)
	// cleanups: the releases of claims that acquires cut short by their
	// context may have written (see releaseUnanswered); Close waits.
	cleanups *stragglers
}

var (
	_ backend.Backend       = (*Store)(nil)
	_ backend.Watcher       = (*Store)(nil)
	_ backend.WaiterWatcher = (*Store)(nil)
	_ backend.Lister        = (*Store)(nil)
	_ backend.ForceReleaser = (*Store)(nil)
)

// New returns a Store that uses client. The Store does not own client:
// Close stops the Store's subscriber but leaves the client open.
//
// For go-redis to honour the deadlines of the contexts baton passes, set
// ContextTimeoutEnabled in the client's options (ParseURL does). New
// returns an error matching backend.ErrInvalidOptions if client is nil (or
// a nil pointer) or an option is invalid (a prefix containing '{' or '}').
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if isNil(client) {
		return nil, fmt.Errorf("redisstore: %w: the client is %s", backend.ErrInvalidOptions, nilName(client))
	}
	o := newOptions(opts)
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		if o.acks > 0 {
			return nil, fmt.Errorf("redisstore: %w: WithReplicaAcks needs a client of one server, a Sentinel primary or a Cluster, not %T",
				backend.ErrInvalidOptions, client)
		}
	}
	return newStore(client, o), nil
}

// isNil reports a nil client, or a nil pointer of a client type (its
// constructor's error ignored), whose methods panic at the first call.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	rv := reflect.ValueOf(c)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// nilName names the nil client c for an error: "nil", or "a nil *T".
func nilName(c redis.UniversalClient) string {
	if c == nil {
		return "nil"
	}
	return fmt.Sprintf("a nil %T", c)
}

func newStore(client redis.UniversalClient, o options) *Store {
	s := &Store{
		client:     client,
		prefix:     o.prefix,
		handover:   o.handover,
		handoff:    o.handover > 0 && o.acks == 0,
		acks:       o.acks,
		ackTimeout: o.ackTimeout,
		hub:        newHub(client, o.linger, o.healthInterval),
		cleanups:   newStragglers(),
	}
	s.waiters = newWaiters(s.leave)
	s.hub.onHanded = s.waiters.notice
	s.renews = newRenewBatcher(renewWindow, s.renewHedged)
	return s
}

// Close waits for the releases of claims that acquires cut short by their
// context may have written (at most 2 s), stops the background subscriber
// that serves Watch (closing every open watch channel), gives up the
// places of its waiters in Redis, and waits for those give-ups and the
// ones that waiters whose context ended started (at most 2 s; a place
// not given up expires once its waiter's next attempt is overdue), fails
// the renewals waiting for their batch, cancels the batches in flight and
// waits for them, and, for a Store made by Open, closes its client.
// Claims still held are not released: they expire after their TTL, and
// their Leases end at their next renewal. Close the Store after every
// Lease was unlocked (and Elector's Run returned), and before the process
// exits (see "Direct handoff" in the package documentation). Afterwards every method returns
// an error matching backend.ErrClosed, which the engine does not retry,
// and so does an operation whose client was closed by its owner. A second
// Close returns nil. A Store that is never closed keeps its subscriber
// connection while any lock was watched in the last minute, then stops it.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.cleanups.close()
	s.hub.close()
	s.waiters.close()
	s.renews.close()
	var errs []error
	for _, c := range s.owned {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// open returns nil, or, once Close was called, an error matching
// backend.ErrClosed for operation op on lock name ("" for none).
func (s *Store) open(op, name string) error {
	if !s.closed.Load() {
		return nil
	}
	return closedError("Store", op, name)
}

func closedError(what, op, name string) error {
	if name == "" {
		return fmt.Errorf("redisstore: %s: %w: Close was called on this %s; open a new one", op, backend.ErrClosed, what)
	}
	return fmt.Errorf("redisstore: %s lock %q: %w: Close was called on this %s; open a new one", op, name, backend.ErrClosed, what)
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Keys returns the Redis keys and the pub/sub channel used for lock name:
//
//	lock:    <prefix>{<name>}:lock     string, expires with the claim (PX)
//	fence:   <prefix>{<name>}:fence    hash, never expires; only Remove deletes it
//	channel: <prefix>{<name>}:notify   pub/sub channel: acquire and release notices
//
// Handoffs to waiters are published on <prefix>{<name>}:handoffs and
// <prefix>{<name>}:handoffs:<holder> (see the package documentation).
//
// The FIFO of waiters uses three more keys, all expiring on their own:
// <prefix>{<name>}:queue (list), :queued (hash) and :next (string); see
// the package documentation.
func (s *Store) Keys(name string) (lock, fence, channel string) {
	k := s.keySet(name)
	return k.lock, k.fence, k.channel
}

// queueKeys returns the keys of the FIFO of waiters for lock name.
func (s *Store) queueKeys(name string) []string {
	return s.keySet(name).all[2:]
}

// keyBase is what every key of lock name starts with: the prefix and the
// name as the hash tag.
func (s *Store) keyBase(name string) string { return s.prefix + "{" + name + "}:" }

// keys is the key names of one lock.
type keys struct {
	name                 string
	lock, fence, channel string
	// handoffs is the channel of every handoff to a waiter of this version
	// (followed by Watch), and handoffs + ":" + holder that of the
	// handoffs to holder (followed by WatchWaiter); see releaseScript.
	handoffs string
	all      []string // lock, fence, queue, queued, next: the scripts' KEYS; never modified
}

// handoffsTo returns the channel of the handoffs to holder's waiters.
func (k *keys) handoffsTo(holder string) string { return k.handoffs + ":" + holder }

// keySet returns lock name's keys. The last lock's are kept: a Store
// mostly serves one lock, or a few in turn, and building seven strings
// for every call shows in an uncontended cycle's allocations.
func (s *Store) keySet(name string) *keys {
	if k := s.last.Load(); k != nil && k.name == name {
		return k
	}
	base := s.keyBase(name)
	k := &keys{name: name, lock: base + "lock", fence: base + "fence", channel: base + "notify", handoffs: base + "handoffs"}
	k.all = []string{k.lock, k.fence, base + "queue", base + "queued", base + "next"}
	s.last.Store(k)
	return k
}

// TryAcquire implements backend.Backend with one script: if the lock key is
// absent (and not reserved for another waiter, see WithHandoverWindow) it
// increments the fence's counter, writes the claim and sets its expiry to
// req.TTL (rounded up to whole milliseconds); otherwise it reports the
// holder and the claim's remaining time as measured by the server
// (HeldError.RetryAfter). While the lock is reserved, the HeldError names
// the waiter it is reserved for and the reservation's remaining time. A
// waiting attempt whose owner a release handed the lock to collects it:
// without a request if this Store heard the handoff's notice (the Grant's
// Age then says from when it counts), or with the script otherwise; see
// "Direct handoff" in the package documentation.
func (s *Store) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if err := s.open("acquire", key); err != nil {
		return backend.Grant{}, err
	}
	if g, ok := s.collect(ctx, key, req); ok {
		return g, nil
	}
	r, err := s.acquire(ctx, key, req)
	if err != nil {
		if ctx.Err() != nil || scriptStopped(err) {
			s.releaseUnanswered(key, req)
		}
		return backend.Grant{}, err
	}
	if !r.acquired {
		return backend.Grant{}, &backend.HeldError{Key: key, Holder: r.holder, Token: r.token, RetryAfter: r.pttl}
	}
	return backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, Token: r.token, TTL: req.TTL}, nil
}

// releaseUnanswered releases the claim that req's acquire, cut short by
// the end of its caller's context, may have written all the same: Redis
// runs a script it received whether or not the client still waits for
// the reply, and the claim would keep everyone out, held by nobody, until
// its TTL ended. So does an acquire whose script a command refused after
// it wrote the claim (scriptStopped: the ACL refused its PUBLISH, or the
// server lacks that command), as Redis keeps a script's writes made before
// an error. The release is owner-checked (it does nothing if req's
// owner holds nothing, and hands a claim on to the next waiter as any
// release does). It runs in the background, so that the caller returns
// when its context ends, bounded by the TTL and 2 s; Close waits for it
// rather than cancel it (a process that gives up a Lock as it shuts down
// closes its Store next, and the release is what frees the lock for the
// next replica).
func (s *Store) releaseUnanswered(key string, req backend.Request) {
	g := backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, TTL: req.TTL}
	s.cleanups.start(func() {
		ctx, cancel := context.WithTimeout(context.Background(), min(req.TTL, 2*time.Second))
		defer cancel()
		_ = s.owned1(ctx, releaseScript, "release", g)
	})
}

// collect returns a lock that a release handed to req's owner, as its
// notice told this Store, without a request (see waiters.collect).
func (s *Store) collect(ctx context.Context, key string, req backend.Request) (backend.Grant, bool) {
	if !s.handoff || ctx.Err() != nil || checkRequest(key, req.Holder, req.Nonce, req.TTL) != nil {
		return backend.Grant{}, false
	}
	k := s.keySet(key)
	token, age, ok := s.waiters.collect(k.channel, ownerArg(req.Holder, req.Nonce), time.Duration(millis(req.TTL))*time.Millisecond, time.Now())
	if !ok {
		return backend.Grant{}, false
	}
	return backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, Token: token, TTL: req.TTL, Age: age}, true
}

// leave gives up a waiter's place, and the lock if a release handed it to
// the waiter and it was never collected (the waiter's context ended).
func (s *Store) leave(ctx context.Context, k *keys, holder, owner string) {
	// Handoff runs without replica acks: the client is the connection.
	_ = releaseScript.Run(ctx, s.client, k.all, holder, owner, k.channel, millis(s.handover), "1", k.handoffs, "").Err()
}

type acquireResult struct {
	acquired bool
	token    uint64
	holder   string        // when held
	pttl     time.Duration // when held
	// call is the call id the acquire script was sent with (the fence's
	// attempt field, if it took the lock), also when its answer is an
	// error; "" if no script was sent.
	call string
}

func (s *Store) acquire(ctx context.Context, key string, req backend.Request) (acquireResult, error) {
	if err := checkRequest(key, req.Holder, req.Nonce, req.TTL); err != nil {
		return acquireResult{}, err
	}
	k := s.keySet(key)
	channel := k.channel
	// A contender that says it keeps trying (a blocking Lock), or that has
	// a watch open on this Store, waits for a release notice: give it a
	// place in the FIFO of waiters. Queueing a blocking Lock at its first
	// refused attempt matters: until its watch is confirmed, a holder that
	// unlocks and locks again would otherwise win every time.
	waits, handoff := "0", "0"
	if s.handover > 0 && (req.Waiting || s.hub.watching(channel)) {
		waits = "1"
	}
	owner := ownerArg(req.Holder, req.Nonce)
	// Only an attempt that says it waits presents its nonce again (every
	// attempt of a Lock call or campaign has the same one), so only it can
	// be handed the lock; an attempt queued because a watch is open (a
	// Semaphore's slot, a caller of the Backend) gets a reservation.
	if waits == "1" && s.handoff && req.Waiting {
		handoff = "1"
		// A handoff to this owner arrives on its holder's handoff channel
		// (WatchWaiter), or on the lock's (Watch).
		mark, markOK := s.hub.mark(channel, k.handoffsTo(req.Holder), k.handoffs)
		if r, ok := s.waiters.refusal(channel, owner, mark, markOK, time.Now()); ok {
			return r, nil
		}
		s.waiters.sending(ctx, k, req.Holder, owner, req.TTL, mark, markOK)
	}
	r, err := s.runAcquire(ctx, k, req, owner, waits, handoff)
	if handoff == "1" {
		s.waiters.answered(channel, owner, err == nil && r.acquired, err == nil && !r.acquired, r)
	}
	return r, err
}

// runAcquire runs acquireScript and interprets its reply.
func (s *Store) runAcquire(ctx context.Context, k *keys, req backend.Request, owner, waits, handoff string) (acquireResult, error) {
	key, lock, channel := k.name, k.lock, k.channel
	sc, done, err := s.conn(ctx, lock)
	if err != nil {
		return acquireResult{}, s.wrap(key, lock, "acquire", err)
	}
	defer done()
	call := callID()
	v, err := acquireScript.Run(ctx, sc, k.all, req.Holder, owner, millis(req.TTL), channel, waits, handoff, call).Slice()
	if err != nil {
		return acquireResult{call: call}, s.namePermissions(ctx, key, s.explain(ctx, k, "acquire", s.wrap(key, lock, "acquire", err)))
	}
	rep := reply{v: v}
	if rep.int(0) == 1 && len(v) == 2 {
		r := acquireResult{acquired: true, token: rep.uint(1), call: call}
		if err := rep.check(s, key, lock, r.token > 0); err != nil {
			return r, err
		}
		if err := s.awaitAcks(ctx, sc); err != nil {
			// Undo the claim that a failover could lose: release it
			// (owner-checked; a failure leaves it to expire).
			_ = releaseScript.Run(ctx, sc, k.all, req.Holder, owner, channel, millis(s.handover), "0", k.handoffs, callID()).Err()
			return acquireResult{}, s.wrap(key, lock, "acquire", fmt.Errorf("%w; the claim was released", err))
		}
		return r, nil
	}
	r := acquireResult{holder: rep.str(1), token: rep.uint(2), pttl: time.Duration(rep.int(3)) * time.Millisecond, call: call}
	return r, rep.check(s, key, lock, len(v) == 4 && rep.int(0) == 0)
}

// Renew implements backend.Backend: if g's owner (holder and nonce) still
// holds the lock, a script sets its expiry to g.TTL from when it runs
// (server time); otherwise it returns an error matching backend.ErrLost. A
// lock that expired is lost even if nobody has taken it since.
//
// The renewals of a Store are batched: a call waits for at most 20 ms
// (none if no batch was sent in the last 20 ms) and is sent with every
// other renewal of that window, as one script per 250 locks (per hash slot
// on a Cluster); see the package documentation, "Many locks". A call whose
// ctx ends before its batch is sent leaves it and returns ctx's error.
func (s *Store) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if err := s.open("renew", g.Key); err != nil {
		return backend.Grant{}, err
	}
	if err := checkRequest(g.Key, g.Holder, g.Nonce, g.TTL); err != nil {
		return backend.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return backend.Grant{}, s.wrap(g.Key, s.lockKey(g.Key), "renew", err)
	}
	if err := s.renews.renew(ctx, g); err != nil {
		return backend.Grant{}, err
	}
	g.Version = ""
	return g, nil
}

// Release implements backend.Backend: if g's owner still holds the lock, one
// script frees it, keeps the fence (the next holder gets a larger token),
// hands it to the longest-waiting waiter if there is one (see
// WithHandoverWindow), and publishes a notice that wakes the watchers it
// concerns. Otherwise it returns an error matching backend.ErrLost.
func (s *Store) Release(ctx context.Context, g backend.Grant) error {
	if err := s.open("release", g.Key); err != nil {
		return err
	}
	return s.explain(ctx, s.keySet(g.Key), "release", s.owned1(ctx, releaseScript, "release", g))
}

// releaseAttempt releases g's claim if the acquisition sent with call id
// call took it (a Redlock attempt's clean-up, see releaseScript); with no
// call, nothing was sent, and there is nothing to release.
func (s *Store) releaseAttempt(ctx context.Context, g backend.Grant, call string) error {
	if call == "" {
		return nil
	}
	k := s.keySet(g.Key)
	sc, done, err := s.conn(ctx, k.lock)
	if err != nil {
		return s.wrap(g.Key, k.lock, "release", err)
	}
	defer done()
	err = releaseScript.Run(ctx, sc, k.all, g.Holder, ownerArg(g.Holder, g.Nonce), k.channel, millis(s.handover), "0", k.handoffs, callID(), call).Err()
	if err != nil {
		return s.wrap(g.Key, k.lock, "release", err)
	}
	return nil
}

// callID returns a new random id for one Release or TryAcquire call (see
// releaseScript and acquireScript): 64 bits, so that two calls on one lock
// never share one.
func callID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// owned1 runs the renew or release script for g and interprets the reply.
func (s *Store) owned1(ctx context.Context, script *redis.Script, op string, g backend.Grant) error {
	if err := checkRequest(g.Key, g.Holder, g.Nonce, g.TTL); err != nil {
		return err
	}
	k := s.keySet(g.Key)
	lock, channel := k.lock, k.channel
	sc, done, err := s.conn(ctx, lock)
	if err != nil {
		return s.wrap(g.Key, lock, op, err)
	}
	defer done()
	var cmd *redis.Cmd
	if script == releaseScript {
		cmd = script.Run(ctx, sc, k.all, g.Holder, ownerArg(g.Holder, g.Nonce), channel, millis(s.handover), "0", k.handoffs, callID())
	} else {
		cmd = script.Run(ctx, sc, k.all[:2], ownerArg(g.Holder, g.Nonce), millis(g.TTL))
	}
	v, err := cmd.Slice()
	if err != nil {
		return s.wrap(g.Key, lock, op, err)
	}
	rep := reply{v: v}
	if rep.int(0) == 1 {
		if err := rep.check(s, g.Key, lock, len(v) == 2); err != nil || script == releaseScript {
			return err
		}
		if err := s.awaitAcks(ctx, sc); err != nil {
			return s.wrap(g.Key, lock, op, err) // a renewal a failover could lose is no renewal
		}
		return nil
	}
	holder, token := rep.str(1), rep.uint(2)
	if err := rep.check(s, g.Key, lock, len(v) == 3); err != nil {
		return err
	}
	return lostError(op, g.Key, lock, holder, token)
}

// lostError says that a renewal or release of lock name (key lock) found
// the lock not its owner's: held by holder with token, or free if holder
// is empty.
func lostError(op, name, lock, holder string, token uint64) error {
	if holder == "" {
		return fmt.Errorf("redisstore: %s lock %q (key %s): %w: the claim expired, was released, or its key was deleted (or the server lost its data)", op, name, lock, backend.ErrLost)
	}
	return fmt.Errorf("redisstore: %s lock %q (key %s): %w: it is now held by %q (token %d)", op, name, lock, backend.ErrLost, holder, token)
}

// ForceRelease implements backend.ForceReleaser: it frees the lock named key
// whoever holds it, keeping the fencing counter, and wakes its watchers.
// It is an administrator's action
// (the CLI's "release" command): a holder whose claim is force-released
// learns it at its next renew, and until then may still act, which is what
// fencing tokens are for. It returns an error matching backend.ErrNotFound if
// the lock has no keys, and succeeds if the lock is already free.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	if err := s.open("force-release", key); err != nil {
		return err
	}
	if err := checkName(key); err != nil {
		return err
	}
	lock, fence, channel := s.Keys(key)
	v, err := forceReleaseScript.Run(ctx, s.client, []string{lock, fence}, channel).Slice()
	if err != nil {
		return s.wrap(key, lock, "force-release", err)
	}
	rep := reply{v: v}
	if err := rep.check(s, key, lock, len(v) == 2); err != nil {
		return err
	}
	if rep.int(0) == 0 {
		return fmt.Errorf("redisstore: lock %q: %w (no key %s or %s)", key, backend.ErrNotFound, lock, fence)
	}
	return nil
}

// Get implements backend.Backend. Remaining is the claim's PTTL as reported by
// the server. After a release Holder is empty; after an expiry it names the
// last holder with Remaining 0. If the lock key was deleted before the
// claim's expiry, Get names the last holder (without nonce or TTL) with the
// time left until that expiry, during which acquisitions are refused. AcquireTime and RenewTime are the server's
// wall-clock times, for display only. It returns an error matching
// backend.ErrNotFound if the lock has neither key.
func (s *Store) Get(ctx context.Context, key string) (backend.Record, error) {
	if err := s.open("get", key); err != nil {
		return backend.Record{}, err
	}
	if err := checkName(key); err != nil {
		return backend.Record{}, err
	}
	lock, fence, _ := s.Keys(key)
	rec, err := s.getReply(ctx, key, getScript.Run(ctx, s.client, []string{lock, fence}))
	return rec, s.namePermissions(ctx, key, err)
}

// getReply reads getScript's reply cmd for lock key.
func (s *Store) getReply(ctx context.Context, key string, cmd *redis.Cmd) (backend.Record, error) {
	v, err := cmd.Slice()
	if err != nil {
		return backend.Record{}, s.wrap(key, s.lockKey(key), "get", s.explainClosed(ctx, err))
	}
	return s.decodeRecord(key, v)
}

func (s *Store) decodeRecord(key string, v []any) (backend.Record, error) {
	lock, fence, _ := s.Keys(key)
	rep := reply{v: v}
	lt, ft, val, pttl, now := rep.str(0), rep.str(1), rep.str(2), rep.int(3), rep.str(4)
	ftoken, ftrans, flast, fexp := rep.str(5), rep.str(6), rep.str(7), rep.str(8)
	if err := rep.check(s, key, lock, len(v) == 9); err != nil {
		return backend.Record{}, err
	}
	corrupt := func(k, format string, args ...any) error {
		return fmt.Errorf("redisstore: lock %q (key %s): %w: "+format+"%s", append([]any{key, k, backend.ErrCorruptRecord}, append(args, corruptFix(k))...)...)
	}
	rec := backend.Record{Key: key}
	switch ft {
	case "none":
	case "hash":
		var err1, err2 error
		rec.Token, err1 = parseUintOr0(ftoken)
		rec.Transitions, err2 = parseUintOr0(ftrans)
		if err1 != nil || err2 != nil {
			return rec, corrupt(fence, "token %q or transitions %q is not a number", ftoken, ftrans)
		}
		rec.Holder = flast
	default:
		return rec, corrupt(fence, "it is a %s, not a hash", ft)
	}
	switch lt {
	case "none":
		if ft == "none" {
			return rec, fmt.Errorf("redisstore: lock %q: %w (no key %s or %s)", key, backend.ErrNotFound, lock, fence)
		}
		// A lock key deleted before its claim's expiry: acquisitions are
		// refused until then (see acquireScript), so report it as held.
		exp, err1 := parseUintOr0(fexp)
		ms, err2 := strconv.ParseUint(now, 10, 64)
		if err1 != nil {
			return rec, corrupt(fence, "expires %q is not a number", fexp)
		}
		if err2 == nil && rec.Holder != "" && exp > ms {
			rec.Remaining = time.Duration(exp-ms) * time.Millisecond
		}
	case "string":
		l, err := decodeLockValue(val)
		if err != nil {
			return rec, corrupt(lock, "%v", err)
		}
		if ft != "hash" || l.token != rec.Token {
			return rec, corrupt(lock, "its token %d differs from the last token issued, %d, in %s", l.token, rec.Token, fence)
		}
		if pttl < 0 {
			return rec, corrupt(lock, "it has no expiry")
		}
		rec.Holder, rec.Nonce, rec.TTL, rec.AcquireTime = l.holder, l.nonce, l.ttl, l.acquired
		// PTTL is rounded down; the key lives until the server's clock has
		// passed its expiry, so 0 means "less than a millisecond", not gone.
		rec.Remaining = time.Duration(max(pttl, 1)) * time.Millisecond
		// Every renewal sets the expiry to the TTL from the server's now, so
		// the last one was TTL - PTTL ago.
		if ms, err := strconv.ParseInt(now, 10, 64); err == nil && l.ttl > 0 {
			rec.RenewTime = time.UnixMilli(ms).Add(-max(l.ttl-time.Duration(pttl)*time.Millisecond, 0))
		}
	default:
		return rec, corrupt(lock, "it is a %s, not a lock value (a string)", lt)
	}
	return rec, nil
}

// listBatch is how many records List reads in one round trip.
const listBatch = 250

// List implements backend.Lister: the records of every lock with a fence key
// under the prefix, sorted by name, found with SCAN (on every master of a
// cluster) and read as Get reads them, listBatch locks per pipeline.
// Records that cannot be read are left out and reported in the error (an
// errors.Join); the others are still returned.
func (s *Store) List(ctx context.Context) ([]backend.Record, error) {
	if err := s.open("list", ""); err != nil {
		return nil, err
	}
	names, err := s.names(ctx)
	if err != nil {
		return nil, err
	}
	var (
		recs []backend.Record
		errs []error
	)
	for len(names) > 0 {
		batch := names[:min(listBatch, len(names))]
		names = names[len(batch):]
		for i, cmd := range s.getMany(ctx, batch) {
			r, err := s.getReply(ctx, batch[i], cmd)
			switch {
			case errors.Is(err, backend.ErrNotFound):
			case err != nil:
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				errs = append(errs, err)
			default:
				recs = append(recs, r)
			}
		}
	}
	return recs, errors.Join(errs...)
}

// getMany runs getScript for each of names in one pipeline (again with
// EVAL for those the server had not cached), and returns the commands,
// aligned with names.
func (s *Store) getMany(ctx context.Context, names []string) []*redis.Cmd {
	keys := make([][]string, len(names))
	cmds := make([]*redis.Cmd, len(names))
	pipe := s.client.Pipeline()
	for i, name := range names {
		base := s.keyBase(name)
		keys[i] = []string{base + "lock", base + "fence"}
		cmds[i] = getScript.EvalSha(ctx, pipe, keys[i])
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	var retry redis.Pipeliner
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = s.client.Pipeline()
			}
			cmds[i] = getScript.Eval(ctx, retry, keys[i])
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	return cmds
}

// names returns the sorted lock names that have a fence key.
func (s *Store) names(ctx context.Context) ([]string, error) {
	pattern := globEscape(s.prefix) + "{*}:fence"
	var mu sync.Mutex // a Cluster's masters are scanned concurrently
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			name, ok := strings.CutPrefix(k, s.prefix+"{")
			if name, ok = strings.CutSuffix(name, "}:fence"); ok && backend.ValidateName(name) == nil {
				mu.Lock()
				seen[name] = true
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: listing locks (SCAN %s): %w", pattern, s.classify(err))
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// Watch implements backend.Watcher. The returned channel receives a value when
// an acquire, release or handoff notice for key arrives, when the subscription is
// (re)confirmed by the server (a notice may have been missed before), and
// when the subscriber connection failed. A claim that expires publishes
// nothing: the engine's retry, no later than the claim's PTTL, covers it.
// The channel is closed when ctx ends or the Store is closed.
//
// Watch returns once the server has confirmed the subscription (or after at
// most a second, in which case the confirmation wakes the channel), so no
// notice published after Watch returned is missed while the connection
// holds. All watches of a Store share one subscriber connection. A lock's channel
// stays subscribed for a while after its last watch ended, so a process
// that locks the same name again and again does not subscribe each time.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	return s.watch(ctx, key, "")
}

// WatchWaiter implements backend.WaiterWatcher: a watch as Watch, for a
// contender waiting to acquire key as holder. It is not woken by
// acquisitions, nor by a release that reserved the lock for another waiter
// (see WithHandoverWindow) until that reservation ends, and it does not
// receive handoffs to other holders (it follows holder's handoff channel,
// not the lock's); Mutex.Lock uses it, so that a release wakes the waiter
// it is reserved for or handed to, not every waiter.
func (s *Store) WatchWaiter(ctx context.Context, key, holder string) (<-chan struct{}, error) {
	return s.watch(ctx, key, holder)
}

func (s *Store) watch(ctx context.Context, key, holder string) (<-chan struct{}, error) {
	if err := s.open("watch", key); err != nil {
		return nil, err
	}
	if err := checkName(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := s.keySet(key)
	// The handoff channel first, and the notice channel once it is
	// confirmed: the notices published before this call that were still
	// on their way have then reached the Store, and do not wake the new
	// watch for nothing. Every notice published after Watch returns is
	// heard all the same.
	channels := []string{k.handoffs, k.channel}
	if holder != "" {
		channels[0] = k.handoffsTo(holder)
	}
	w := newWatcher()
	w.holder = holder
	// The wait for confirmations lasts at most confirmTimeout in all. A
	// channel the Store follows already (a waiter that locks again) is
	// confirmed: no timer then.
	var wctx context.Context
	for i, channel := range channels {
		confirmed, err := s.hub.add(ctx, channel, k.channel, w)
		if err != nil {
			for _, added := range channels[:i] {
				s.hub.remove(added, w)
			}
			return nil, fmt.Errorf("redisstore: watch lock %q (channel %s): %w", key, channel, err)
		}
		if isClosed(confirmed) {
			continue
		}
		if wctx == nil {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, confirmTimeout)
			defer cancel()
		}
		if !awaitConfirmed(wctx, confirmed) {
			s.hub.returnedEarly(channel, w)
		}
	}
	if err := w.refusal(); err != nil {
		for _, channel := range channels {
			s.hub.remove(channel, w)
		}
		return nil, fmt.Errorf("redisstore: watch lock %q: the server refused the subscription: %w", key, s.classify(err))
	}
	context.AfterFunc(ctx, func() {
		for _, channel := range channels {
			s.hub.remove(channel, w)
		}
		w.close()
	})
	return w.c, nil
}

// wrap names the lock and key in a store error and maps Redis errors to
// baton's sentinels (classify).
func (s *Store) wrap(name, key, op string, err error) error {
	if k, msg, ok := scriptCorrupt(err); ok {
		return corruptErr(op, name, k, msg)
	}
	return fmt.Errorf("redisstore: %s lock %q (key %s): %w", op, name, key, s.classify(err))
}

// classify maps a Redis error to baton's sentinels, with the cause and the
// fix where they are known.
//
// On a Cluster, an error that leaves the store unavailable (a node that
// refuses connections or does not answer, CLUSTERDOWN) also makes the
// client reload its map of the slots: go-redis reloads it only on MOVED
// or ASK, or when it is older than ClusterStateReloadInterval (a minute
// by default), so after the primary of a lock's slot is lost for good
// (its machine gone) and its replica promoted, every request for the
// slot would go on to the dead address for up to that minute, longer than
// any TTL, instead of to the new primary. The reload runs in the
// background, at most one at a time (go-redis coalesces them).
func (s *Store) classify(err error) error {
	c := s.classifyErr(err)
	if cc, ok := s.client.(*redis.ClusterClient); ok && errors.Is(c, backend.ErrUnavailable) {
		cc.ReloadState(context.Background())
	}
	return c
}

func (s *Store) classifyErr(err error) error {
	msg := err.Error()
	var noHello *noHelloError
	switch {
	case errors.As(err, &noHello):
		return fmt.Errorf("%w: %w", backend.ErrMisconfigured, err)
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("%w: the Redis client was closed (%v); open a new client and Store", backend.ErrClosed, err)
	case strings.HasPrefix(msg, corruptCode):
		return fmt.Errorf("%w: %s", backend.ErrCorruptRecord, strings.TrimSpace(strings.TrimPrefix(msg, corruptCode)))
	case strings.Contains(msg, "WRONGTYPE"):
		return fmt.Errorf("%w: one of the lock's keys holds another type than baton writes (%v): another program uses baton's key names; "+
			"baton status NAME, or redis-cli TYPE on each key (go doc redisstore, Key layout), names it", backend.ErrCorruptRecord, err)
	case strings.HasPrefix(msg, "READONLY"):
		return s.readOnly(err)
	case strings.HasPrefix(msg, "NOPERM"), scriptRefusedByACL(msg):
		return fmt.Errorf("%w: %w; give the user the rules of redisstore.ACLRules", backend.ErrForbidden, err)
	case strings.Contains(msg, unknownInScript):
		return fmt.Errorf("%w: %w: a command baton's scripts run is disabled or renamed on this server (rename-command); "+
			"baton needs the commands of redisstore.ACLRules under their own names", backend.ErrMisconfigured, err)
	case strings.Contains(msg, "all sentinels") && (strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOPERM")):
		return fmt.Errorf("%w: the sentinels refused this client's credentials (%v): give theirs in the URL as ?sentinel_password=P (and &sentinel_username=U for an ACL user); the user and password before the @ are the data nodes'",
			backend.ErrForbidden, err)
	case errors.Is(err, redis.Nil) && strings.Contains(msg, "all sentinels"):
		// go-redis's wording; the sentinels did answer, with no address.
		return fmt.Errorf("%w: the sentinels answered, but none monitors a primary by the name the URL gives (%v): write the name of their `sentinel monitor NAME ...` after the URL's last / (redis-cli -h SENTINEL -p PORT SENTINEL MASTERS lists them)",
			backend.ErrMisconfigured, err)
	case strings.Contains(msg, "cluster support disabled"):
		return fmt.Errorf("%w: %v: the server is not a Redis Cluster node: give a single server as redis://host:port, or a Sentinel-managed primary as redis+sentinel://",
			backend.ErrMisconfigured, err)
	case (strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")) && !s.isCluster():
		return fmt.Errorf("%w: %v: the server is a Redis Cluster node, which a client of one server cannot follow: give the cluster as redis+cluster://N1:PORT,N2:PORT,... (or build the Store on a *redis.ClusterClient)",
			backend.ErrMisconfigured, err)
	case strings.HasPrefix(msg, "ERR unknown command") && (strings.Contains(msg, "evalsha") || strings.Contains(msg, "'eval'")):
		return fmt.Errorf("%w: the server does not run Lua scripts (%s), which baton needs: a Redis Sentinel answers so (give the sentinels as %s://S1:26379,S2:26379,.../PRIMARY, with the name they monitor the primary by), and so do a server whose EVAL and EVALSHA an operator renamed or disabled (rename-command) and a proxy or Redis-compatible server without scripting",
			backend.ErrMisconfigured, strings.TrimSpace(msg), schemeSentinel)
	case strings.HasPrefix(msg, "ERR unknown command"):
		return fmt.Errorf("%w: %w: the server has no such command (disabled or renamed with rename-command); baton needs every command of redisstore.ACLRules under its own name",
			backend.ErrMisconfigured, err)
	case strings.HasPrefix(msg, "redis: invalid reply:"), strings.HasPrefix(msg, "redis: can't parse"):
		// go-redis's wording for a reply that is not RESP at all, or not
		// the RESP its command expects (an HTTP server's "HTTP/1.1 400"
		// read as the answer to HELLO).
		return fmt.Errorf("%w: the server does not answer in the Redis protocol (%v): the URL's host and port are another service's (an HTTP server, a proxy's admin port?)",
			backend.ErrMisconfigured, err)
	case strings.Contains(msg, "DB index is out of range"):
		return fmt.Errorf("%w: the URL selects a database the server does not have (%v): use a database number below the server's databases setting (16 unless redis.conf says otherwise), or raise that setting",
			backend.ErrMisconfigured, err)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("%w: %w: the server requires a password, and the URL gives none: write redis://USER:PASSWORD@HOST:PORT (an ACL user), or redis://:PASSWORD@HOST:PORT (requirepass)", backend.ErrForbidden, err)
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("%w: %w: the server refused the URL's user and password (a URL that names no user, redis://:PASSWORD@, logs in as the user default, which ACL setups often disable): "+
			"give an enabled ACL user and its password as redis://USER:PASSWORD@HOST:PORT (ACL LIST on the server shows the users); "+
			"if the URL worked before, the user's password was changed, or the user disabled or deleted, since this process connected: "+
			"a new connection needs the current password (to rotate a password, add the new one with ACL SETUSER USER >NEW, restart with it, then remove the old one)", backend.ErrForbidden, err)
	}
	if why, ok := busyServer(msg); ok {
		return fmt.Errorf("%w: %w (%s)", backend.ErrUnavailable, err, why)
	}
	return storeerr.Classify(err)
}

// readOnly classifies a write refused with READONLY. A client of one
// server was given a replica's address (or an operator made the server a
// replica with REPLICAOF): a misconfiguration, which retrying cannot fix.
// A Sentinel or Cluster client that meets a replica was following a
// primary that has just been demoted (a failover, or REPLICAOF by hand):
// the store is unavailable until the sentinels, or the cluster's map of
// the slots, name the new primary, which the client then follows.
func (s *Store) readOnly(err error) error {
	if _, ok := oneServer(s.client); ok {
		return fmt.Errorf("%w: the server is a read-only replica: give the primary's address, or a %s:// URL that follows failovers (%v)",
			backend.ErrMisconfigured, schemeSentinel, err)
	}
	return fmt.Errorf("%w: %w (the primary the client followed is now a read-only replica: a failover, or REPLICAOF by hand; retried until the sentinels or the cluster name the new primary)",
		backend.ErrUnavailable, err)
}

// unknownInScript is how Redis refuses a command that a script calls and
// the server does not have (disabled or renamed with rename-command).
const unknownInScript = "Unknown Redis command called from script"

// scriptRefusedByACL reports whether msg is Redis's refusal, by the ACL,
// of a command that a script calls (Redis 7.0 says what it refused, a
// command, a key or a channel, but not which; later versions name it).
// Unlike a refused EVALSHA, it comes after the script ran the commands
// before it, and their writes stay.
func scriptRefusedByACL(msg string) bool {
	return strings.Contains(msg, "user executing the script can't") || strings.Contains(msg, "ACL failure in script")
}

// scriptStopped reports whether err is a script's refusal of a command
// it calls (by the ACL, or as unknown to the server), which leaves the
// writes of the commands before it.
func scriptStopped(err error) bool {
	msg := err.Error()
	return scriptRefusedByACL(msg) || strings.Contains(msg, unknownInScript)
}

// busyServer recognises the answers of a server that cannot serve a
// request now but will (loading its data, running a long script, a
// replica without its primary, a cluster failing over or resharding,
// too few replicas for min-replicas-to-write, memory full, a full
// connection table), and says why: the engine retries them, and the CLI
// counts the store as unavailable, not as an unknown failure.
func busyServer(msg string) (string, bool) {
	for _, b := range []struct{ prefix, why string }{
		{"LOADING ", "the server is loading its data after a restart"},
		{"BUSY ", "a script or function is running on the server (SCRIPT KILL or FUNCTION KILL ends one that has not written)"},
		{"MASTERDOWN ", "the replica lost its link to its primary"},
		{"TRYAGAIN ", "the cluster is moving the lock's hash slot"},
		// A Cluster's client follows redirections itself (wrap tells a
		// client of one server so first); one that still reaches the
		// caller came while the slot moved (the safety suite's slot
		// migration row saw one on a batched renewal).
		{"ASK ", "the cluster is moving the lock's hash slot"},
		{"MOVED ", "the cluster moved the lock's hash slot"},
		{"CLUSTERDOWN ", "the cluster cannot serve the lock's hash slot now"},
		{"NOREPLICAS ", "fewer replicas than min-replicas-to-write are connected"},
		{"OOM ", "the server reached maxmemory with a policy that evicts nothing"},
		{"ERR max number of clients reached", "the server has maxclients connections"},
	} {
		if strings.HasPrefix(msg, b.prefix) {
			return b.why, true
		}
	}
	return "", false
}

// isCluster reports whether the Store's client is a Redis Cluster's, which
// follows MOVED and ASK redirections itself.
func (s *Store) isCluster() bool {
	_, ok := s.client.(*redis.ClusterClient)
	return ok
}

// reply reads the array a script returned.
type reply struct {
	v   []any
	bad bool
}

func (r *reply) int(i int) int64 {
	if i < 0 || i >= len(r.v) {
		r.bad = true
		return 0
	}
	n, ok := r.v[i].(int64)
	if !ok {
		r.bad = true
	}
	return n
}

func (r *reply) uint(i int) uint64 {
	n := r.int(i)
	if n < 0 {
		r.bad = true
		return 0
	}
	return uint64(n)
}

func (r *reply) str(i int) string {
	if i < 0 || i >= len(r.v) {
		r.bad = true
		return ""
	}
	s, ok := r.v[i].(string)
	if !ok {
		r.bad = true
	}
	return s
}

// check reports a reply of an unexpected shape: a script/server mismatch,
// not a corrupt record.
func (r *reply) check(s *Store, name, key string, shapeOK bool) error {
	if r.bad || !shapeOK {
		return fmt.Errorf("redisstore: lock %q (key %s): unexpected script reply %v", name, key, r.v)
	}
	return nil
}

func parseUintOr0(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// millis returns d in whole milliseconds, rounded up: the server may keep a
// claim a little longer than asked, never shorter.
func millis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// maxTTL keeps TTLs within what PEXPIRE and the scripts' arithmetic accept.
const maxTTL = 365 * 24 * time.Hour

func checkName(key string) error {
	if err := backend.ValidateName(key); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

func checkRequest(key, holder, nonce string, ttl time.Duration) error {
	if err := checkName(key); err != nil {
		return err
	}
	switch {
	case holder == "" || nonce == "":
		return fmt.Errorf("redisstore: lock %q: %w: holder %q and nonce %q must not be empty", key, backend.ErrInvalidOptions, holder, nonce)
	case ttl <= 0 || ttl > maxTTL:
		return fmt.Errorf("redisstore: lock %q: %w: TTL %v is not in (0, %v]", key, backend.ErrInvalidOptions, ttl, maxTTL)
	}
	return nil
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
