// Package bench compares baton's Redis backend with peer libraries on the
// same redis-server in the same run. It is its own module so that the peer
// libraries never enter baton's dependency graph.
//
//	cd bench && go test -run TestRedisReport -v -count=1 .
//
// The report is a Markdown table on stdout (and in $BENCH_OUT if set).
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/bench/internal/contend"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Parameters of the report.
const (
	lockTTL = 10 * time.Second

	lanLatency = 100 * time.Microsecond

	contenders     = 8
	contendedLimit = 60 * time.Second
)

// Sizes of the report (smaller with BENCH_QUICK).
var (
	uncontendedCycles = 3000
	uncontendedRounds = 15 // paired rounds: see the targets
	lanRounds         = 5
	lanCycles         = 500
	sharedTotal       = 400 // acquisitions in all, whoever makes them (the setup)
	// sharedMin is the length of the extra shared-total run. redsync and
	// redislock make 400 acquisitions in 20-50 ms with one contender
	// re-locking while the others sleep in retry delays of 50-250 ms
	// (redsync) or 50 ms (redislock); a run that short cuts the sleepers'
	// waits at its own length. 2 s is eight times redsync's longest retry
	// delay and five times the worst wait the author saw (about
	// 375 ms), so a starved wait shows at its length.
	sharedMin    = 2 * time.Second
	perContender = 100 // acquisitions each contender makes
	handovers    = 100
	// handoverRounds: the handovers are taken in rounds, the libraries'
	// turns rotating.
	handoverRounds = 4
)

// contender is one process's handle on a lock: its own client (connection
// pool) and library objects.
type contender interface {
	// lock blocks until the lock is held and returns its unlock function.
	lock(ctx context.Context) (unlock func(context.Context) error, err error)
	close()
}

type library struct {
	name, config string
	open         func(addr, key, id string) contender
}

// newStore is redisstore.New with the default options, which are valid.
func newStore(c redis.UniversalClient) *redisstore.Store {
	s, err := redisstore.New(c)
	if err != nil {
		panic(err)
	}
	return s
}

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

var libraries = []library{
	{
		name:   "baton redisstore",
		config: "Mutex.Lock/Unlock (a Lease with renewals, a watch, FIFO handover); waiters woken by pub/sub, RetryPeriod 2s as fallback",
		open: func(addr, key, id string) contender {
			c := newClient(addr)
			s := newStore(c)
			m, err := baton.NewMutex(s, key, baton.WithIdentity(id), baton.WithTTL(lockTTL),
				baton.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				panic(err)
			}
			return &batonContender{c: c, s: s, m: m}
		},
	},
	{
		name:   "bsm/redislock",
		config: "Obtain with LinearBackoff(50ms)",
		open: func(addr, key, id string) contender {
			c := newClient(addr)
			return &redislockContender{c: c, l: redislock.New(c), key: key}
		},
	},
	{
		name:   "go-redsync/redsync",
		config: "LockContext, default retry delay 50-250ms, unlimited tries",
		open: func(addr, key, id string) contender {
			c := newClient(addr)
			rs := redsync.New(goredis.NewPool(c))
			return &redsyncContender{c: c, m: rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(1<<30))}
		},
	},
	{
		name:   "raw SET NX PX + Lua DEL",
		config: "retry every 1ms",
		open: func(addr, key, id string) contender {
			return &rawContender{c: newClient(addr), key: key}
		},
	},
}

// batonParts are extra rows of the uncontended table that split baton's
// cost: the backend's two scripts alone, and the engine without a watch.
var batonParts = []library{
	{
		name:   "baton Store.TryAcquire+Release (backend only)",
		config: "the two scripts, no engine",
		open: func(addr, key, id string) contender {
			c := newClient(addr)
			return &storeContender{c: c, s: newStore(c), key: key, id: id}
		},
	},
	{
		name:   "baton Mutex.TryLock+Unlock (engine, no watch)",
		config: "a Lease with its keeper goroutine, no watch",
		open: func(addr, key, id string) contender {
			b := libraries[0].open(addr, key, id).(*batonContender)
			b.try = true
			return b
		},
	},
}

// commandsFloor is the floor of a cycle that runs the Redis commands of
// baton's uncontended cycle, each for a guarantee, in two scripts without
// baton's logic (no parsing, no checks, constant values): acquire reads
// the server time (tokens above any a restarted server issued; the
// deleted-key guard's expiry) and the fence (the token counter and the
// guard), writes the claim with SET NX PX, writes the fence and publishes a
// notice (watchers send no requests); release reads the claim (owner
// check) and the FIFO of waiters, deletes the claim, clears the guard in
// the fence and publishes. What baton's cycle costs beyond it is its
// logic; what it costs beyond the raw floor is those commands.
var commandsFloor = library{
	name:   "floor: baton's Redis commands, no logic",
	config: "acquire: one script of TIME, HMGET of 5 fence fields, SET NX PX, HSET of 4 fence fields, PUBLISH; release: one script of GET, LRANGE, DEL, HSET of 2 fence fields, PUBLISH",
	open: func(addr, key, id string) contender {
		return &commandsContender{c: newClient(addr), keys: []string{key, key + ":fence", key + ":queue"}}
	},
}

type commandsContender struct {
	c    *redis.Client
	keys []string
}

var (
	commandsAcquire = redis.NewScript(`local t = redis.call('TIME')
redis.call('HMGET', KEYS[2], 'token', 'transitions', 'holder', 'expires', 'reserved')
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], 'token', t[2], 'transitions', '1', 'holder', 'h', 'expires', t[1])
redis.call('PUBLISH', KEYS[1], 'acquired')
return 1`)
	commandsRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('LRANGE', KEYS[3], 0, -1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'holder', '', 'expires', '0')
redis.call('PUBLISH', KEYS[1], 'released')
return 1`)
)

func (r *commandsContender) lock(ctx context.Context) (func(context.Context) error, error) {
	val := randomValue()
	n, err := commandsAcquire.Run(ctx, r.c, r.keys, val, lockTTL.Milliseconds()).Int()
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return nil, errors.New("commands floor: the lock is held")
	}
	return func(ctx context.Context) error {
		n, err := commandsRelease.Run(ctx, r.c, r.keys, val).Int()
		if err == nil && n != 1 {
			err = errors.New("commands floor: lock lost")
		}
		return err
	}, nil
}

func (r *commandsContender) close() { _ = r.c.Close() }

type storeContender struct {
	c       *redis.Client
	s       *redisstore.Store
	key, id string
}

func (s *storeContender) lock(ctx context.Context) (func(context.Context) error, error) {
	g, err := s.s.TryAcquire(ctx, s.key, backend.Request{Holder: s.id, Nonce: baton.NewNonce(), TTL: lockTTL})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return s.s.Release(ctx, g) }, nil
}

func (s *storeContender) close() { _ = s.s.Close(); _ = s.c.Close() }

type batonContender struct {
	c   *redis.Client
	s   *redisstore.Store
	m   *baton.Mutex
	try bool // TryLock instead of Lock
}

func (b *batonContender) lock(ctx context.Context) (func(context.Context) error, error) {
	lock := b.m.Lock
	if b.try {
		lock = b.m.TryLock
	}
	l, err := lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (b *batonContender) close() { _ = b.s.Close(); _ = b.c.Close() }

type redislockContender struct {
	c   *redis.Client
	l   *redislock.Client
	key string
}

func (r *redislockContender) lock(ctx context.Context) (func(context.Context) error, error) {
	l, err := r.l.Obtain(ctx, r.key, lockTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(50 * time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (r *redislockContender) close() { _ = r.c.Close() }

type redsyncContender struct {
	c *redis.Client
	m *redsync.Mutex
}

func (r *redsyncContender) lock(ctx context.Context) (func(context.Context) error, error) {
	if err := r.m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := r.m.UnlockContext(ctx); return err }, nil
}

func (r *redsyncContender) close() { _ = r.c.Close() }

// randomValue returns a fresh lock value for the raw contenders: 16
// random bytes in hex.
func randomValue() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rawContender is the floor: SET NX PX to acquire, a compare-and-delete
// script to release: two round trips a cycle, no token, no renewal.
type rawContender struct {
	c   *redis.Client
	key string
}

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (r *rawContender) lock(ctx context.Context) (func(context.Context) error, error) {
	val := randomValue()
	for {
		ok, err := r.c.SetNX(ctx, r.key, val, lockTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error {
				n, err := rawRelease.Run(ctx, r.c, []string{r.key}, val).Int()
				if err == nil && n != 1 {
					err = errors.New("raw: lock lost")
				}
				return err
			}, nil
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *rawContender) close() { _ = r.c.Close() }

// notifyFloor is the handover floor on this machine: a raw waiter blocked
// on its own pub/sub connection retries SET NX as soon as the release
// script's PUBLISH arrives: one notice plus one round trip, no engine.
var notifyFloor = library{
	name:   "floor: raw SET NX + PUBLISH/SUBSCRIBE",
	config: "the waiter blocks in Receive on its own SUBSCRIBE connection; release is compare-DEL plus PUBLISH",
	open: func(addr, key, id string) contender {
		c := newClient(addr)
		ps := c.Subscribe(context.Background(), key+":n")
		if _, err := ps.Receive(context.Background()); err != nil { // the confirmation
			panic(err)
		}
		return &notifyContender{rawContender: rawContender{c: c, key: key}, ps: ps}
	},
}

type notifyContender struct {
	rawContender
	ps *redis.PubSub
}

var notifyRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[1] .. ':n', '1') return 1 end return 0`)

func (r *notifyContender) lock(ctx context.Context) (func(context.Context) error, error) {
	val := randomValue()
	for {
		ok, err := r.c.SetNX(ctx, r.key, val, lockTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error {
				_, err := notifyRelease.Run(ctx, r.c, []string{r.key}, val).Int()
				return err
			}, nil
		}
		if _, err := r.ps.ReceiveTimeout(ctx, time.Second); err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

func (r *notifyContender) close() { _ = r.ps.Close(); _ = r.c.Close() }

// fairFloor is the floor of a fair lock on this machine: each release
// hands the lock to the oldest waiter in one script (LPOP of a waiting
// list, SET of the key for it, PUBLISH on its own channel), and the
// waiter, blocked in Receive on its own subscription, holds it when the
// message arrives: one script and one notice per handover, nothing else
// (no token, no TTL renewal, no engine). The unfair raw loop never hands
// over at all: its re-locking contender keeps the lock in one goroutine.
var fairFloor = library{
	name:   "floor: raw FIFO handoff (script + PUBLISH to the next waiter)",
	config: "lock: SET NX, or RPUSH to a waiting list and block in Receive on its own channel; unlock: LPOP the next waiter, SET the key for it and PUBLISH to it, or DEL",
	open: func(addr, key, id string) contender {
		return openFair(addr, key, id, fairLock, fairUnlock, key+":waiting")
	},
}

// openFair returns a contender that locks with lockScript (KEYS: key and
// extra; ARGV: id, TTL in ms; 1 if it holds the lock, 0 if it waits for
// the message on its own channel) and unlocks with unlockScript (the same
// KEYS and ARGV).
func openFair(addr, key, id string, lockScript, unlockScript *redis.Script, extra ...string) *fairContender {
	c := newClient(addr)
	ps := c.Subscribe(context.Background(), key+":to:"+id)
	if _, err := ps.Receive(context.Background()); err != nil { // the confirmation
		panic(err)
	}
	return &fairContender{c: c, ps: ps, id: id, keys: append([]string{key}, extra...), lockScript: lockScript, unlockScript: unlockScript}
}

type fairContender struct {
	c                        *redis.Client
	ps                       *redis.PubSub
	id                       string
	keys                     []string
	lockScript, unlockScript *redis.Script
	// notes, if set by readNotices, receives the payloads of the
	// contender's notices from a reader goroutine, and a waiter waits for
	// its own in a select (see waitSelect); leave gives up a wait.
	notes      chan string
	readerDone chan struct{}
	leave      *redis.Script
}

// readNotices starts a goroutine that reads f's notices and passes their
// payloads on to f.notes; it ends when f is closed. leave (KEYS and ARGV
// as the lock script's) gives up a waiter's place, and returns 2 if the
// lock was handed to it (the waiter then releases it). It is for a
// contender whose lock passes the owner as the third argument and whose
// handoff notices end with it (the checks floor's).
func (f *fairContender) readNotices(leave *redis.Script) {
	f.notes, f.readerDone, f.leave = make(chan string, 16), make(chan struct{}), leave
	go func() {
		defer close(f.readerDone)
		for {
			m, err := f.ps.ReceiveMessage(context.Background())
			if err != nil {
				return
			}
			select {
			case f.notes <- m.Payload:
			default: // a waiter takes its own notice at once; never more than a few are left
			}
		}
	}()
}

// waitSelect waits for the notice that hands the lock to the owner in
// args (args[2]) as a blocking lock that keeps baton's guarantees must:
// in a select on the notice, the caller's context, and a timer at the
// claim's TTL (a holder that dies publishes nothing; a lock would try
// again then, this floor fails). Notices for an earlier owner of this
// contender (a wait that gave up) are skipped. When ctx ends it gives up
// the place, and releases the lock if it was handed meanwhile.
func (f *fairContender) waitSelect(ctx context.Context, args []any) error {
	suffix := " " + args[2].(string)
	t := time.NewTimer(lockTTL)
	defer t.Stop()
	for {
		select {
		case p := <-f.notes:
			if strings.HasSuffix(p, suffix) {
				return nil
			}
		case <-ctx.Done():
			return errors.Join(ctx.Err(), f.giveUp(args))
		case <-t.C:
			return errors.New("no handoff within the TTL")
		}
	}
}

// giveUp leaves the place of the wait with args, and releases the lock if
// it was handed to that wait.
func (f *fairContender) giveUp(args []any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := f.leave.Run(ctx, f.c, f.keys, args...).Int()
	if err == nil && n == 2 {
		err = f.unlockScript.Run(ctx, f.c, f.keys, args...).Err()
	}
	return err
}

var (
	fairLock = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
redis.call('RPUSH', KEYS[2], ARGV[1]) return 0`)
	fairUnlock = redis.NewScript(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local n = redis.call('LPOP', KEYS[2])
if n then redis.call('SET', KEYS[1], n, 'PX', ARGV[2]) redis.call('PUBLISH', KEYS[1] .. ':to:' .. n, '1') else redis.call('DEL', KEYS[1]) end
return 1`)
)

func (f *fairContender) lock(ctx context.Context) (func(context.Context) error, error) {
	unlock, err := f.lockWith(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := unlock(ctx); return err }, nil
}

// lockWith locks with extra ARGV after the id and TTL, and returns the
// unlock, which passes the same and returns the unlock script's reply.
func (f *fairContender) lockWith(ctx context.Context, extra ...any) (func(context.Context) (int, error), error) {
	args := append([]any{f.id, lockTTL.Milliseconds()}, extra...)
	n, err := f.lockScript.Run(ctx, f.c, f.keys, args...).Int()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		if f.notes != nil {
			err = f.waitSelect(ctx, args)
		} else {
			_, err = f.ps.ReceiveMessage(ctx)
		}
		if err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) (int, error) {
		return f.unlockScript.Run(ctx, f.c, f.keys, args...).Int()
	}, nil
}

func (f *fairContender) close() {
	_ = f.ps.Close()
	_ = f.c.Close()
	if f.readerDone != nil {
		<-f.readerDone
	}
}

var runID atomic.Int64

func uniqueKey(what string) string {
	return fmt.Sprintf("bench-%s-%d-%d", what, os.Getpid(), runID.Add(1))
}

// uncontended returns acquire+release cycles per second of one contender.
func uncontended(t *testing.T, lib library, addr string) float64 {
	return uncontendedN(t, lib, addr, uncontendedCycles)
}

func uncontendedN(t *testing.T, lib library, addr string, cycles int) float64 {
	c := lib.open(addr, uniqueKey("u"), "solo")
	defer c.close()
	ctx := t.Context()
	run := func(n int) time.Duration {
		start := time.Now()
		for range n {
			unlock, err := c.lock(ctx)
			if err != nil {
				t.Fatalf("%s: lock: %v", lib.name, err)
			}
			if err := unlock(ctx); err != nil {
				t.Fatalf("%s: unlock: %v", lib.name, err)
			}
		}
		return time.Since(start)
	}
	run(50) // warm up connections and scripts
	return float64(cycles) / run(cycles).Seconds()
}

type contendedResult = contend.Result

// contended runs contenders in tight lock/unlock loops (see
// contend.RunAtLeast): a run until total acquisitions lasts at least
// minDur.
func contended(t *testing.T, lib library, addr string, total, each int, minDur time.Duration) contendedResult {
	key := uniqueKey("c")
	locks := make([]contend.LockFunc, contenders)
	for i := range locks {
		c := lib.open(addr, key, fmt.Sprintf("contender-%d", i))
		defer c.close()
		locks[i] = c.lock
	}
	return contend.RunAtLeast(t, lib.name, contendedLimit, locks, total, each, minDur)
}

// rotatedHandovers runs handover for each of libs in handoverRounds
// rounds of handovers/handoverRounds (see contend.Rotated).
func rotatedHandovers(t *testing.T, libs []library, addr string) map[string][]time.Duration {
	return contend.Rotated(handoverRounds, libs, func(l library) string { return l.name },
		func(l library) []time.Duration { return handover(t, l, addr, handovers/handoverRounds) })
}

// handover measures, for a waiter blocked in lock, the time from the
// moment the holder starts its unlock to the moment the waiter holds the
// lock, n times. The holder unlocks after a random 10-60ms, so that
// pollers are caught at a random point of their poll interval.
func handover(t *testing.T, lib library, addr string, n int) []time.Duration {
	key := uniqueKey("h")
	a := lib.open(addr, key, "holder")
	defer a.close()
	b := lib.open(addr, key, "waiter")
	defer b.close()
	var out []time.Duration
	for range n {
		var t0 time.Time
		at := contend.Handover(t, a.lock, b.lock, handoverWait(), func(unlock func() error) error {
			t0 = time.Now()
			return unlock()
		})
		out = append(out, at.Sub(t0))
	}
	slices.Sort(out)
	return out
}

// handoverWait is how long a handover's holder waits before it unlocks: a
// random 10-60ms, so that pollers are caught at a random point of their
// poll interval.
func handoverWait() time.Duration { return time.Duration(10+mrand.IntN(50)) * time.Millisecond }

// unlockSamples is the number of handovers unlockServerTimes times per
// library.
const unlockSamples = 30

// unlockServerTimes runs n handovers of lib as handover does and returns
// the server's time running the holder's unlock script in each: the first
// script SLOWLOG recorded after a reset just before the unlock, read when
// the unlock returned (every command is logged meanwhile; a waiter's
// request after the notice comes later).
func unlockServerTimes(t *testing.T, lib library, addr string, n int) []time.Duration {
	ctx := t.Context()
	adm := newClient(addr)
	defer adm.Close()
	was, err := adm.ConfigGet(ctx, "slowlog-log-slower-than").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	defer adm.ConfigSet(context.Background(), "slowlog-log-slower-than", was["slowlog-log-slower-than"])
	key := uniqueKey("u")
	a, b := lib.open(addr, key, "holder"), lib.open(addr, key, "waiter")
	defer a.close()
	defer b.close()
	var out []time.Duration
	for i := 0; len(out) < n; i++ {
		if i == 2*n {
			t.Fatalf("%s: SLOWLOG recorded the unlock script in %d of %d handovers", lib.name, len(out), i)
		}
		var logs []redis.SlowLog
		contend.Handover(t, a.lock, b.lock, handoverWait(), func(unlock func() error) error {
			if err := adm.SlowLogReset(ctx).Err(); err != nil {
				return err
			}
			if err := unlock(); err != nil {
				return err
			}
			var err error
			logs, err = adm.SlowLogGet(ctx, 128).Result()
			return err
		})
		for j := len(logs) - 1; j >= 0; j-- { // oldest first
			if cmd := strings.ToLower(logs[j].Args[0]); cmd == "evalsha" || cmd == "eval" {
				out = append(out, logs[j].Duration)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestRedisReport(t *testing.T) {
	if testing.Short() {
		t.Skip("the report takes a minute or two")
	}
	quick := os.Getenv("BENCH_QUICK") != ""
	if quick { // a smoke run of the harness, not figures
		uncontendedCycles, uncontendedRounds, lanRounds, lanCycles = 300, 1, 1, 50
		sharedTotal, perContender, handovers = 80, 20, 20
		sharedMin = 200 * time.Millisecond
	}
	srv := testenv.StartRedis(t)
	addr := srv.Addr()
	ver := redisVersion(t, addr)

	// Uncontended: rounds interleave the libraries, so that a slow phase of
	// the machine does not favour one; the median round counts.
	rates := map[string][]float64{}
	all := append(append(slices.Clone(libraries), batonParts...), commandsFloor, checksFloor)
	for r := range uncontendedRounds {
		for i := range all {
			lib := all[(i+r)%len(all)] // each library takes each place in turn
			rates[lib.name] = append(rates[lib.name], uncontended(t, lib, addr))
		}
	}
	raw := median(rates[libraries[len(libraries)-1].name])

	var b strings.Builder
	fmt.Fprintf(&b, "redis-server %s on 127.0.0.1 (PING round trip %v), %s/%s, %d CPUs, %s; TTL %v; %s\n\n",
		ver, round(pingRTT(t, addr)), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), lockTTL, loadNote())
	if quick {
		fmt.Fprintf(&b, "**BENCH_QUICK smoke run: small rounds; not figures to quote.**\n\n")
	}
	fmt.Fprintf(&b, "Uncontended acquire+release cycles/s (one contender, median of %d rounds of %d cycles):\n\n", uncontendedRounds, uncontendedCycles)
	fmt.Fprintf(&b, "| library | cycles/s | × raw floor |\n|---|---:|---:|\n")
	for _, lib := range all {
		m := median(rates[lib.name])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f |\n", lib.name, m, m/raw)
	}

	// The same through a proxy that adds lanLatency each way: a LAN-like
	// round trip, where the scripts' server time matters less.
	proxy, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetLatency(lanLatency)
	lan := map[string][]float64{}
	for range lanRounds {
		for _, lib := range all {
			lan[lib.name] = append(lan[lib.name], uncontendedN(t, lib, proxy.Addr(), lanCycles))
		}
	}
	rawLAN := median(lan[libraries[len(libraries)-1].name])
	fmt.Fprintf(&b, "\nThe same through internal/faultproxy asked to add %v each way; measured PING round trip %v (this VM's timers "+
		"round each delay up to about a millisecond), median of %d rounds of %d cycles:\n\n",
		lanLatency, round(pingRTT(t, proxy.Addr())), lanRounds, lanCycles)
	fmt.Fprintf(&b, "| library | cycles/s | × raw floor |\n|---|---:|---:|\n")
	for _, lib := range all {
		m := median(lan[lib.name])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f |\n", lib.name, m, m/rawLAN)
	}

	fmt.Fprintf(&b, "\n%d contenders (each its own client) in tight lock/unlock loops until %d acquisitions in all (the issue's setup), "+
		"after a warm-up in which the contenders wait for the lock (the fair floors subscribe when opened, baton at a Lock's first wait); "+
		"lock calls still waiting at the end count with their wait so far. "+
		"\"p99 of waiting time\" weighs each wait by its length: 99%% of all time spent waiting was in waits no longer than this:\n\n",
		contenders, sharedTotal)
	const contendedHead = "| library | acquisitions/s | × raw floor | wait p50 | wait p99 | p99 of waiting time | wait max | scripts run per acquisition | acquisitions per contender |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
	fmt.Fprint(&b, contendedHead)
	shared := printContended(&b, t, addr, sharedTotal, 0, 0)
	fmt.Fprintf(&b, "\nThe same, but every contender makes %d acquisitions; counts are taken when the first is done:\n\n", perContender)
	fmt.Fprintf(&b, "| library | acquisitions/s | × raw floor | wait p50 | wait p99 | p99 of waiting time | wait max | scripts run per acquisition | acquisitions per contender when the first was done |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	each := printContended(&b, t, addr, 0, perContender, 0)
	fmt.Fprintf(&b, "\nThe first table again, but for at least %v. redsync and redislock make %d acquisitions in a few tens of milliseconds, "+
		"one contender re-locking while the others sleep in retry delays of 50-250 ms (redsync) or 50 ms (redislock), so in the "+
		"issue's setup every sleeper's wait is cut at the run's length, and the peers' p99 measures the run, not the wait. Over a "+
		"longer run their re-locking contender's many short waits fill the p99 instead; the starved waits show in the longest wait "+
		"and in the p99 of waiting time:\n\n", sharedMin, sharedTotal)
	fmt.Fprint(&b, contendedHead)
	printContended(&b, t, addr, sharedTotal, 0, sharedMin)
	fmt.Fprintf(&b, "\nHandover: holder's unlock call to the waiter holding the lock (%d handovers, unlock 10-60ms after the waiter started, taken in %d rounds with the libraries' turns rotating):\n\n", handovers, handoverRounds)
	fmt.Fprintf(&b, "| library | p50 | p99 | max | p50 × floor |\n|---|---:|---:|---:|---:|\n")
	hlibs := append(slices.Clone(libraries), notifyFloor, fairFloor, handoffCommandsFloor, checksFloor)
	hs := rotatedHandovers(t, hlibs, addr)
	hf := hs[notifyFloor.name]
	for _, lib := range hlibs {
		h := hs[lib.name]
		fmt.Fprintf(&b, "| %s | %v | %v | %v | %.2f |\n", lib.name, round(h[len(h)/2]), round(h[len(h)*99/100]), round(h[len(h)-1]),
			float64(h[len(h)/2])/float64(hf[len(hf)/2]))
	}
	slibs := []library{libraries[0], handoffCommandsFloor, checksFloor, fairFloor, notifyFloor}
	fmt.Fprintf(&b, "\nThe server's time running the holder's unlock script in a handover (SLOWLOG, every command logged, %d handovers of each after the same 10-60 ms wait; "+
		"not the handovers timed above, as SLOWLOG's own commands run between the unlock and the waiter's turn): "+
		"where a handover's time goes between the server's Lua and the two clients:\n\n", unlockSamples)
	fmt.Fprintf(&b, "| library | p50 | p90 |\n|---|---:|---:|\n")
	us := map[string][]time.Duration{}
	for _, lib := range slibs {
		u := unlockServerTimes(t, lib, addr, unlockSamples)
		us[lib.name] = u
		fmt.Fprintf(&b, "| %s | %v | %v |\n", lib.name, round(u[len(u)/2]), round(u[len(u)*9/10]))
	}
	fmt.Fprintf(&b, "\nConfigurations:\n\n")
	for _, lib := range append(all, notifyFloor, fairFloor, handoffCommandsFloor) { // checksFloor is in all
		fmt.Fprintf(&b, "- %s: %s\n", lib.name, lib.config)
	}

	// Targets (issue 19), computed from this run's figures.
	bn, rl, rs, rw := libraries[0].name, libraries[1].name, libraries[2].name, libraries[3].name
	ub := median(rates[bn])
	fmt.Fprintf(&b, "\nTargets (issue 19), computed from the tables above:\n\n")
	// Rounds are paired: in each, every library ran once, back to back. The
	// median of the per-round ratios is less moved by a slow phase of the
	// machine than the ratio of medians; the quartiles show the spread, and
	// the control (the raw floor against redsync, which send the same two
	// commands) shows how far two equal clients differ here.
	paired := func(a, b string) (q1, med, q3 float64) {
		var r []float64
		for i := range rates[a] {
			r = append(r, rates[a][i]/rates[b][i])
		}
		slices.Sort(r)
		return r[len(r)/4], r[len(r)/2], r[(3*len(r))/4]
	}
	w1, wm, w3 := paired(bn, rw)
	l1, lm, l3 := paired(bn, rl)
	c1, cm, c3 := paired(rw, rs)
	_, fm, _ := paired(commandsFloor.name, rw)
	_, bf, _ := paired(bn, commandsFloor.name)
	_, km, _ := paired(checksFloor.name, rw)
	_, kl, _ := paired(checksFloor.name, rl)
	_, bk, _ := paired(bn, checksFloor.name)
	fmt.Fprintf(&b, "- uncontended at least 0.9x the raw floor: %s (median of %d paired rounds %.2fx, quartiles %.2f-%.2f; "+
		"ratio of medians %.2fx; through the 2 ms round trip %.2fx). The commands baton's cycle runs, without its logic: %.2fx the raw floor; baton %.2fx of them; "+
		"those commands with the checks baton's guarantees need, lean: %.2fx the raw floor%s; baton %.2fx of them (paired medians)\n",
		outOfReach(wm >= 0.9, km >= 0.9), uncontendedRounds, wm, w1, w3, ub/raw, median(lan[bn])/rawLAN, fm, bf, km, reachNote(km >= 0.9), bk)
	fmt.Fprintf(&b, "- uncontended no slower than redislock: %s (median of %d paired rounds %.2fx, quartiles %.2f-%.2f; "+
		"control, raw floor against redsync, the same two commands: %.2fx, quartiles %.2f-%.2f; the checks floor: %.2fx redislock%s)\n",
		outOfReach(lm >= 1, kl >= 1), uncontendedRounds, lm, l1, l3, cm, c1, c3, kl, reachNote(kl >= 1))
	hb, hf := hs[bn], hs[notifyFloor.name]
	hb50 := hb[len(hb)/2]
	for _, c := range []struct {
		what string
		r    map[string]contendedResult
	}{{fmt.Sprintf("%d in all", sharedTotal), shared}, {fmt.Sprintf("%d each", perContender), each}} {
		b0, raw0, fair0, cmd0, chk0 := c.r[bn], c.r[rw], c.r[fairFloor.name], c.r[handoffCommandsFloor.name], c.r[checksFloor.name]
		fmt.Fprintf(&b, "- contended (%s): throughput at least 1.0x the raw unfair loop's: %s (%.2fx; %.2fx the raw FIFO handoff floor's %.0f/s, "+
			"which is %.2fx the unfair loop's; %.2fx that floor with baton's handoff commands, %.0f/s, which is %.2fx the unfair loop's; "+
			"%.2fx those commands with the checks baton's guarantees need, lean, %.0f/s, which is %.2fx the unfair loop's%s); "+
			"no contender starved: %s (%v); "+
			"p99 wait at most 8x the handover p50: %s (%v, %.1fx %v; the FIFO floor's p99 %v, with baton's commands %v)\n",
			c.what, outOfReach(b0.PerSecond >= raw0.PerSecond, chk0.PerSecond >= raw0.PerSecond), b0.PerSecond/raw0.PerSecond, b0.PerSecond/fair0.PerSecond, fair0.PerSecond,
			fair0.PerSecond/raw0.PerSecond, b0.PerSecond/cmd0.PerSecond, cmd0.PerSecond, cmd0.PerSecond/raw0.PerSecond,
			b0.PerSecond/chk0.PerSecond, chk0.PerSecond, chk0.PerSecond/raw0.PerSecond, reachNote(chk0.PerSecond >= raw0.PerSecond),
			metStr(!slices.Contains(b0.Counts, 0)), b0.Counts,
			metStr(b0.P99 <= 8*hb50), round(b0.P99), float64(b0.P99)/float64(max(hb50, 1)), round(hb50), round(fair0.P99), round(cmd0.P99))
	}
	hff, hcf, hkf := hs[fairFloor.name], hs[handoffCommandsFloor.name], hs[checksFloor.name]
	hk50, hkMet := hkf[len(hkf)/2], hkf[len(hkf)/2] <= hf[len(hf)/2]*11/10
	fmt.Fprintf(&b, "- handover p50 at most 1.1x the notify floor: %s (%v, %.2fx the floor's %v; %.2fx the raw polling floor's %v; "+
		"the raw FIFO handoff floor, one script and one notice as baton's: %v, %.2fx the notify floor's, and baton %.2fx of it; "+
		"that floor with baton's handoff commands: %v, %.2fx the notify floor's, and baton %.2fx of it; "+
		"with the checks baton's guarantees need too, lean: %v, %.2fx the notify floor's%s, and baton %.2fx of it; "+
		"the server ran baton's unlock script for %v against the commands floor's %v and the checks floor's %v, p50)\n",
		outOfReach(hb50 <= hf[len(hf)/2]*11/10, hkMet), round(hb50), float64(hb50)/float64(hf[len(hf)/2]), round(hf[len(hf)/2]),
		float64(hb50)/float64(hs[rw][len(hs[rw])/2]), round(hs[rw][len(hs[rw])/2]),
		round(hff[len(hff)/2]), float64(hff[len(hff)/2])/float64(hf[len(hf)/2]), float64(hb50)/float64(hff[len(hff)/2]),
		round(hcf[len(hcf)/2]), float64(hcf[len(hcf)/2])/float64(hf[len(hf)/2]), float64(hb50)/float64(hcf[len(hcf)/2]),
		round(hk50), float64(hk50)/float64(hf[len(hf)/2]), reachNote(hkMet), float64(hb50)/float64(hk50),
		round(us[bn][len(us[bn])/2]), round(us[handoffCommandsFloor.name][len(us[handoffCommandsFloor.name])/2]), round(us[checksFloor.name][len(us[checksFloor.name])/2]))
	fmt.Print(b.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// outOfReach is a target's verdict: met, not met, or not met and out of
// reach when floorMet says a floor of the same run, one that does only what
// the target's guarantees need (checksFloor), missed it too.
func outOfReach(met, floorMet bool) string {
	if !met && !floorMet {
		return "**not met, out of reach**"
	}
	return metStr(met)
}

// reachNote says after the checks floor's figure whether it met the target.
func reachNote(floorMet bool) string {
	if floorMet {
		return ", which meets the target"
	}
	return ", short of the target too: out of reach in this run"
}

// printContended runs the contended test for every library, the raw floor
// first, and prints each row with its throughput as a multiple of the
// floor's (rows in the libraries' order).
func printContended(b *strings.Builder, t *testing.T, addr string, total, each int, minDur time.Duration) map[string]contendedResult {
	rs := map[string]contendedResult{}
	scripts := map[string]float64{}
	run := func(lib library) {
		s0 := scriptCalls(t, addr)
		r := contended(t, lib, addr, total, each, minDur)
		rs[lib.name], scripts[lib.name] = r, (scriptCalls(t, addr)-s0)/float64(len(r.Order))
	}
	raw := libraries[len(libraries)-1]
	run(raw)
	for _, lib := range libraries[:len(libraries)-1] {
		run(lib)
	}
	run(fairFloor)
	run(handoffCommandsFloor)
	run(checksFloor)
	for _, lib := range append(slices.Clone(libraries), fairFloor, handoffCommandsFloor, checksFloor) {
		r := rs[lib.name]
		fmt.Fprintf(b, "| %s | %.0f | %.2f | %v | %v | %v | %v | %.1f | %v |\n", lib.name, r.PerSecond, r.PerSecond/rs[raw.name].PerSecond,
			round(r.P50), round(r.P99), round(r.P99Time), round(r.Max), scripts[lib.name], r.Counts)
	}
	return rs
}

// scriptCalls is how many Lua scripts (EVAL and EVALSHA) the server has
// run (INFO commandstats): refused attempts cost a script each, so the
// count per acquisition shows how many waiters a release woke in vain.
func scriptCalls(t testing.TB, addr string) float64 {
	return commandStats(t, addr).scripts().calls
}

// cmdStat is one line of INFO commandstats: calls and the server's time
// in them. A script's line includes the commands it ran, which also count
// on their own lines.
type cmdStat struct{ calls, usec float64 }

type cmdStats map[string]cmdStat // by command name, lower case

// commandStats reads INFO commandstats.
func commandStats(t testing.TB, addr string) cmdStats {
	c := newClient(addr)
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := cmdStats{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(k, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(v, ",") {
			f, val, _ := strings.Cut(kv, "=")
			switch f {
			case "calls":
				st.calls, _ = strconv.ParseFloat(val, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(val, 64)
			}
		}
		m[name] = st
	}
	return m
}

// minus is what s counted since s0.
func (s cmdStat) minus(s0 cmdStat) cmdStat { return cmdStat{s.calls - s0.calls, s.usec - s0.usec} }

// scripts sums the EVAL and EVALSHA lines.
func (m cmdStats) scripts() cmdStat {
	return cmdStat{m["eval"].calls + m["evalsha"].calls, m["eval"].usec + m["evalsha"].usec}
}

// perCommand lists, by name, the commands counted between m0 and m, INFO
// aside, each as "name calls/µs" per one of k operations.
func (m cmdStats) perCommand(m0 cmdStats, k float64) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		d := m[name].minus(m0[name])
		if name == "info" || d.calls/k < 0.005 {
			continue
		}
		out = append(out, fmt.Sprintf("%s %.2f/%.1fµs", name, d.calls/k, d.usec/k))
	}
	return strings.Join(out, ", ")
}

// inScripts sums, between m0 and m, every command but the scripts and
// INFO itself: on a server only scripts write to, the commands the
// scripts ran (and the clients' own, such as SUBSCRIBE and PING).
func (m cmdStats) inScripts(m0 cmdStats) cmdStat {
	var st cmdStat
	for name, v := range m {
		if name == "eval" || name == "evalsha" || name == "info" {
			continue
		}
		d := v.minus(m0[name])
		st.calls += d.calls
		st.usec += d.usec
	}
	return st
}

// pingRTT returns the median PING round trip to addr.
func pingRTT(t *testing.T, addr string) time.Duration {
	c := newClient(addr)
	defer c.Close()
	var d []time.Duration
	for range 201 {
		start := time.Now()
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// median returns the middle value of v (the upper one of an even count).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func redisVersion(t *testing.T, addr string) string {
	c := newClient(addr)
	defer c.Close()
	if v, ok := infoFields(t, c, "server")["redis_version"]; ok {
		return v
	}
	return "?"
}

// infoFields reads one section of INFO as its "field:value" lines.
func infoFields(t testing.TB, c *redis.Client, section string) map[string]string {
	info, err := c.Info(t.Context(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}
