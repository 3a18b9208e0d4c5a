//go:build linux

package safety

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// pauseModes are the CLIENT PAUSE modes the rounds take in turn: WRITE
// holds back the scripts (every baton script writes) and lets reads
// through; ALL holds back every command.
var pauseModes = []string{"WRITE", "ALL"}

// pauseClients has every Redis server pause its clients (CLIENT PAUSE, as
// an operator does before a manual failover, or a proxy's maintenance
// does) right after one of a holder's accepted writes, for longer than
// the TTL: 1.5 TTL in the short mode, between one and two TTLs in the
// long one. The rounds take WRITE and ALL in turn. While paused, a server
// answers no script, the holder's renewals and everyone's acquires wait
// in its queue, and it expires no key; when the pause ends, the claim has
// expired by the server's clock and the waiting scripts run. The holder
// must end its tenure by its own validity, before the pause ends, a
// renewal it sent before must not extend a claim that has expired, the
// lock must go on within the liveness bound of the pause's end, and
// tokens must go on increasing: the checker sees no repeated token, no
// two holders and no stale write accepted.
func (h *harness) pauseClients(round, minWrites int) {
	h.t.Helper()
	mode := pauseModes[round%len(pauseModes)]
	d := h.be.ttl * 3 / 2
	if long() {
		d = h.be.ttl + time.Duration(h.rng.Int64N(int64(h.be.ttl)))
	}
	var err error
	f := h.waitFired(h.armHold(false, true, minWrites, func(string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = h.be.pauseClients(ctx, mode, d)
	}), "CLIENT PAUSE")
	if err != nil {
		h.t.Fatalf("CLIENT PAUSE %s under %s's token %d: %v", mode, f.c, f.tok, err)
	}
	what := fmt.Sprintf("CLIENT PAUSE %v %s under %s's token %d", d, mode, f.c, f.tok)
	resumed := f.at + d
	h.disturb("", f.at, resumed+h.be.ttl, "clients paused")
	end := h.tenureEnd(f.c, f.tok, d+30*time.Second)
	if end.At > resumed {
		h.t.Errorf("%s: the holder ended its tenure (%s) %v after the pause ended, by which the server had expired its claim",
			what, end.Cause, (end.At - resumed).Round(time.Millisecond))
	}
	next, ok := h.acquiredAfter(f.tok, d+h.be.bound()+30*time.Second)
	if !ok {
		h.t.Fatalf("%s: no acquisition after it", what)
	}
	h.t.Logf("%s: the holder's tenure ended (%s) %v into the pause; %s acquired token %d %v after the pause",
		what, end.Cause, (end.At - f.at).Round(time.Millisecond), next.C, next.Tok, (next.At - resumed).Round(time.Millisecond))
	h.takeover(what, max(0, next.At-resumed))
	h.writesAbove(f.tok, 3, 30*time.Second)
}

// redisPause pauses the clients of every server at addrs for d in mode
// (CLIENT PAUSE d mode), each on a connection of its own.
func redisPause(addrs ...string) func(context.Context, string, time.Duration) error {
	return func(ctx context.Context, mode string, d time.Duration) error {
		var errs []error
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			ms := strconv.FormatInt(d.Milliseconds(), 10)
			if err := c.Do(ctx, "CLIENT", "PAUSE", ms, mode).Err(); err != nil {
				errs = append(errs, fmt.Errorf("CLIENT PAUSE %s %s on %s: %w", ms, mode, a, err))
			}
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
}
