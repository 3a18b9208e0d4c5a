package bench

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/bench/internal/contend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// Component benchmarks: where an uncontended cycle's time goes.
func BenchmarkCycle(b *testing.B) {
	srv := testenv.StartRedis(b)
	addr := srv.Addr()
	ctx, cancelAll := context.WithCancel(context.Background()) // cancelable, like t.Context() in the report
	defer cancelAll()
	cpu := func(b *testing.B) { cpuPerOp(b, addr) }
	// The peers by their short names, the bare commands of baton's cycle
	// (whose script-µs/op, beside the Store's, is the cost of baton's Lua
	// logic) and those commands with the checks its guarantees need,
	// written lean (beside the Store's, what that logic costs beyond them).
	named := map[string]library{"commands-floor": commandsFloor, "checks-floor": checksFloor}
	for _, lib := range libraries[1:3] {
		named[lib.name[strings.LastIndex(lib.name, "/")+1:]] = lib
	}
	for _, name := range slices.Sorted(maps.Keys(named)) {
		lib := named[name]
		b.Run(name, func(b *testing.B) {
			c := lib.open(addr, uniqueKey("p"), "x")
			defer c.close()
			cpu(b)
			for b.Loop() {
				u, err := c.lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				_ = u(ctx)
			}
		})
	}
	b.Run("raw", func(b *testing.B) {
		c := libraries[len(libraries)-1].open(addr, uniqueKey("r"), "x")
		defer c.close()
		cpu(b)
		for b.Loop() {
			u, _ := c.lock(ctx)
			_ = u(ctx)
		}
	})
	b.Run("store-try-release", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := newStore(c)
		defer s.Close()
		key := uniqueKey("s")
		cpu(b)
		for b.Loop() {
			g, err := s.TryAcquire(ctx, key, backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: lockTTL})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Release(ctx, g)
		}
	})
	b.Run("store-try-release-watched", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := newStore(c)
		defer s.Close()
		key := uniqueKey("s")
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := s.Watch(wctx, key); err != nil {
			b.Fatal(err)
		}
		cpu(b)
		for b.Loop() {
			g, err := s.TryAcquire(ctx, key, backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: lockTTL})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Release(ctx, g)
		}
	})
	b.Run("mutex-trylock", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := newStore(c)
		defer s.Close()
		m, _ := baton.NewMutex(s, uniqueKey("m"), baton.WithTTL(lockTTL), baton.WithLogger(slog.New(slog.DiscardHandler)))
		cpu(b)
		for b.Loop() {
			l, err := m.TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Unlock(ctx)
		}
	})
	b.Run("mutex-lock", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := newStore(c)
		defer s.Close()
		m, _ := baton.NewMutex(s, uniqueKey("m"), baton.WithTTL(lockTTL), baton.WithLogger(slog.New(slog.DiscardHandler)))
		cpu(b)
		for b.Loop() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Unlock(ctx)
		}
	})
	_ = time.Second
}

// cpuPerOp reports, at the end of b, the CPU time this process and the
// redis-server at addr spent per operation (getrusage and INFO cpu): less
// noisy than wall time on a shared machine.
func cpuPerOp(b *testing.B, addr string) {
	c := newClient(addr)
	serverCPU := func() float64 { _, cpu := redisStats(c); return cpu.Seconds() }
	// scriptTime is the server's time running Lua scripts (INFO
	// commandstats: EVAL and EVALSHA, each including the commands the
	// script calls), which server-µs/op (the whole process, its network
	// stack included) is too coarse to show.
	scriptTime := func() float64 { return commandStats(b, addr).scripts().usec }
	s0, c0, l0 := serverCPU(), selfCPU().Seconds(), scriptTime()
	b.Cleanup(func() {
		s1, c1, l1 := serverCPU(), selfCPU().Seconds(), scriptTime()
		_ = c.Close()
		b.ReportMetric((c1-c0)/float64(b.N)*1e6, "client-µs/op")
		b.ReportMetric((s1-s0)/float64(b.N)*1e6, "server-µs/op")
		b.ReportMetric((l1-l0)/float64(b.N), "script-µs/op")
	})
}

// TestUncontendedRounds repeats the report's uncontended table alone, with
// more rounds (BENCH_ROUNDS, default 9), for comparing changes to the cycle:
//
//	BENCH_UNCONTENDED=1 go test -run TestUncontendedRounds -v .
func TestUncontendedRounds(t *testing.T) {
	if os.Getenv("BENCH_UNCONTENDED") == "" {
		t.Skip("set BENCH_UNCONTENDED=1")
	}
	rounds := 9
	if n, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	addr := testenv.StartRedis(t).Addr()
	all := append(slices.Clone(libraries), batonParts...)
	rates := map[string][]float64{}
	for range rounds {
		for _, lib := range all {
			rates[lib.name] = append(rates[lib.name], uncontended(t, lib, addr))
		}
	}
	base := median(rates[libraries[1].name])
	for _, lib := range all {
		m := median(rates[lib.name])
		t.Logf("%-50s %6.0f cycles/s  %.2fx redislock", lib.name, m, m/base)
	}
}

// counts are this process's allocations and goroutines started so far:
// per acquisition, a measure of the contenders' work that does not move
// with the machine's load, as their CPU time does.
type counts struct{ allocs, bytes, goroutines uint64 }

func clientCounts() counts {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	g := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(g)
	return counts{allocs: ms.Mallocs, bytes: ms.TotalAlloc, goroutines: g[0].Value.Uint64()}
}

// TestContendedCPU runs 8 contenders in tight lock/unlock loops for 3 s,
// the raw unfair loop, baton, the FIFO handoff floor with baton's
// commands, the same with the checks baton's guarantees need (checksFloor),
// that with its waiter in a select as baton's (checksWaitingFloor), and the
// raw FIFO handoff floor in turn, and logs the CPU that
// the contenders' process and the redis-server spent per acquisition, and
// the scripts run per acquisition with the server's time in them and in
// the commands they called (INFO commandstats; what is left of a script's
// time is Lua and the cost of each redis.call): on this 2-CPU machine
// the contended rate is bound by CPU, so the sum of the two CPU figures
// is each row's budget per acquisition, and the unfair loop's is the
// budget that issue 19's contended target leaves a fair lock. It also
// logs the contenders' allocations and the goroutines they started per
// acquisition, which do not move with the machine's load. A row of
// baton's Store driven without the engine (storeWaiting) says how much of
// baton's cost is the engine's. Under each row it logs the commands the
// server ran per acquisition (calls and µs, by name) and the bytes it
// received and sent per acquisition, so that two rows with the same
// commands can be told apart by what is left: Lua, and the requests'
// size.
//
// BENCH_ROWS=<part of a row's name> runs only the rows that contain it
// (to profile one row: -test.cpuprofile, or perf on the redis-server).
//
//	BENCH_CONTENDED=1 go test -run TestContendedCPU -v .
func TestContendedCPU(t *testing.T) {
	if os.Getenv("BENCH_CONTENDED") == "" {
		t.Skip("set BENCH_CONTENDED=1")
	}
	addr := testenv.StartRedis(t).Addr()
	info := newClient(addr)
	defer info.Close()
	for _, lib := range []library{libraries[len(libraries)-1], libraries[0], storeWaiting, handoffCommandsFloor, checksFloor, checksWaitingFloor, fairFloor} {
		if only := os.Getenv("BENCH_ROWS"); !strings.Contains(lib.name, only) {
			continue
		}
		key := uniqueKey("cpu")
		var locks []contend.LockFunc
		for i := range contenders {
			c := lib.open(addr, key, "contender-"+strconv.Itoa(i))
			defer c.close()
			locks = append(locks, c.lock)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		var n atomic.Int64
		var wg sync.WaitGroup
		_, s0 := redisStats(info)
		m0 := clientCounts()
		in0, out0 := netBytes(t, info)
		c0, e0, start := selfCPU(), commandStats(t, addr), time.Now()
		for _, lock := range locks {
			wg.Go(func() {
				for ctx.Err() == nil {
					unlock, err := lock(ctx)
					if err != nil {
						return
					}
					n.Add(1)
					_ = unlock(context.Background())
				}
			})
		}
		wg.Wait()
		cancel()
		elapsed := time.Since(start).Seconds()
		k := float64(n.Load())
		m1 := clientCounts()
		_, s1 := redisStats(info)
		c1, e1 := selfCPU(), commandStats(t, addr)
		in1, out1 := netBytes(t, info)
		scripts, inner := e1.scripts().minus(e0.scripts()), e1.inScripts(e0)
		client, server := float64((c1-c0).Microseconds())/k, float64((s1-s0).Microseconds())/k
		t.Logf("%s: %.0f acquisitions/s; per acquisition: CPU %.0f µs, the contenders' %.0f µs and redis-server's %.0f µs; "+
			"scripts %.2f taking %.1f µs, of which %.1f commands taking %.1f µs; "+
			"contenders' allocations %.1f (%.0f bytes), goroutines started %.2f",
			lib.name, k/elapsed, client+server, client, server,
			scripts.calls/k, scripts.usec/k, inner.calls/k, inner.usec/k,
			float64(m1.allocs-m0.allocs)/k, float64(m1.bytes-m0.bytes)/k, float64(m1.goroutines-m0.goroutines)/k)
		t.Logf("  per acquisition: %.0f bytes received and %.0f sent by redis-server; commands: %s",
			(in1-in0)/k, (out1-out0)/k, e1.perCommand(e0, k))
	}
}

// netBytes returns the bytes the server has received and sent since it
// started (INFO stats).
func netBytes(t testing.TB, c *redis.Client) (in, out float64) {
	f := infoFields(t, c, "stats")
	in, _ = strconv.ParseFloat(f["total_net_input_bytes"], 64)
	out, _ = strconv.ParseFloat(f["total_net_output_bytes"], 64)
	return in, out
}

// storeWaiting is baton's Store driven as the engine drives it for a
// blocking Lock, with none of the engine's own work (no Lease, keeper,
// events or retry policy): one nonce per call, a waiting TryAcquire, the
// holder's handoff watch (WatchWaiter) opened at the first refusal and
// closed once acquired, and a retry on a notice or after RetryAfter.
var storeWaiting = library{
	name:   "baton Store, waiting, without the engine",
	config: "TryAcquire (Waiting) + WatchWaiter + Release, no Mutex",
	open: func(addr, key, id string) contender {
		c := newClient(addr)
		return &storeWaiter{c: c, s: newStore(c), key: key, id: id}
	},
}

type storeWaiter struct {
	c       *redis.Client
	s       *redisstore.Store
	key, id string
}

func (w *storeWaiter) lock(ctx context.Context) (func(context.Context) error, error) {
	req := backend.Request{Holder: w.id, Nonce: baton.NewNonce(), TTL: lockTTL, Waiting: true}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var woken <-chan struct{}
	for {
		g, err := w.s.TryAcquire(ctx, w.key, req)
		if err == nil {
			return func(ctx context.Context) error { return w.s.Release(ctx, g) }, nil
		}
		var held *backend.HeldError
		if !errors.As(err, &held) {
			return nil, err
		}
		if woken == nil {
			if woken, err = w.s.WatchWaiter(wctx, w.key, w.id); err != nil {
				return nil, err
			}
			continue // as the engine does: a notice may have come before the watch
		}
		retry := time.NewTimer(held.RetryAfter)
		select {
		case <-woken:
		case <-retry.C:
		case <-ctx.Done():
		}
		retry.Stop()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (w *storeWaiter) close() { _ = w.s.Close(); _ = w.c.Close() }
