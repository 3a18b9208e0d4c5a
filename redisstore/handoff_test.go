package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// counter is a go-redis hook that counts the commands a client sends (a
// pipeline's commands each).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countingStore returns a Store on addr with prefix whose client counts
// its commands.
func countingStore(t *testing.T, addr, prefix string) (*redisstore.Store, *counter) {
	t.Helper()
	c := newClient(t, addr)
	n := &counter{}
	c.AddHook(n)
	s := mustNew(t, c, redisstore.WithPrefix(prefix))
	t.Cleanup(func() { _ = s.Close() })
	return s, n
}

func waitingRequest(holder string, ttl time.Duration) backend.Request {
	r := request(holder, ttl)
	r.Waiting = true
	return r
}

// handOver has a take the lock, b's waiting attempt rb be refused (b
// takes its place), and a release it, which hands it to b (or, with
// replica acks, reserves it for b); it returns a's grant.
func handOver(t *testing.T, ctx context.Context, key string, a, b *redisstore.Store, rb backend.Request) backend.Grant {
	t.Helper()
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, key, rb)
	heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	return ga
}

// awaitHandoff waits for woken, b's watch, to be woken by the handoff to b.
func awaitHandoff(t *testing.T, ctx context.Context, woken <-chan struct{}) {
	t.Helper()
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatal("b's watch was not woken by the handoff to b")
	}
}

// collectHanded has b's attempt rb collect the lock handed to it without
// a command (sent counts b's commands).
func collectHanded(t *testing.T, ctx context.Context, key string, b *redisstore.Store, sent *counter, rb backend.Request) backend.Grant {
	t.Helper()
	before := sent.n.Load()
	g, err := b.TryAcquire(ctx, key, rb)
	if err != nil {
		t.Fatalf("b after the handoff: %v", err)
	}
	if n := sent.n.Load() - before; n != 0 {
		t.Errorf("collecting the handed lock sent %d commands, want none", n)
	}
	return g
}

// TestHandoffCollectsWithoutRequest: a waiter told by the notice that the
// lock was handed to it collects it without a command, and the grant's
// validity counts from its refused attempt, which Redis ran before the
// handoff.
func TestHandoffCollectsWithoutRequest(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "handoff"
	a := newStore(t, srv.Addr(), prefix)
	b, sent := countingStore(t, srv.Addr(), prefix)
	woken, err := b.WatchWaiter(ctx, key, "b")
	if err != nil {
		t.Fatal(err)
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rb := waitingRequest("b", time.Minute)
	beforeRefused := time.Now()
	_, err = b.TryAcquire(ctx, key, rb)
	heldBy(t, err)
	afterRefused := time.Now()
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	awaitHandoff(t, ctx, woken)
	beforeCollect := time.Now()
	g := collectHanded(t, ctx, key, b, sent, rb)
	afterCollect := time.Now()
	if g.Age < beforeCollect.Sub(afterRefused) || g.Age > afterCollect.Sub(beforeRefused) {
		t.Errorf("grant age %v; want the time since b's refused attempt was sent, within [%v, %v]",
			g.Age, beforeCollect.Sub(afterRefused), afterCollect.Sub(beforeRefused))
	}
	rec, err := a.Get(ctx, key)
	if err != nil || rec.Holder != "b" || rec.Nonce != rb.Nonce || rec.Token != g.Token || g.Token <= ga.Token {
		t.Fatalf("record %+v, %v; grant %+v: want b's claim with the grant's token, above %d", rec, err, g, ga.Token)
	}
	// The claim is b's like any other: it renews and releases it.
	if _, err := b.Renew(ctx, g); err != nil {
		t.Errorf("Renew of the handed lock: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Errorf("Release of the handed lock: %v", err)
	}
}

// TestHandoffNoticeMissedCollectsByRequest: a waiter that did not hear the
// notice (no watch) collects the handed lock with its next attempt, which
// counts the TTL from then; the collection happens once.
func TestHandoffNoticeMissedCollectsByRequest(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "handoff-missed"
	a, b := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	rb := waitingRequest("b", 30*time.Second)
	handOver(t, ctx, key, a, b, rb)
	lock, _, _ := a.Keys(key)
	c := newClient(t, srv.Addr())
	// Let the handed claim age, so that the collection's new expiry shows.
	if err := c.PExpire(ctx, lock, 20*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := b.TryAcquire(ctx, key, rb)
	if err != nil {
		t.Fatalf("b after a handoff it did not hear of: %v", err)
	}
	if g.Age != 0 {
		t.Errorf("a lock collected by a request has age %v, want 0", g.Age)
	}
	if pttl, err := c.PTTL(ctx, lock).Result(); err != nil || pttl <= 20*time.Second {
		t.Errorf("PTTL after the collection: %v, %v; want the TTL (30s) counted from the collection", pttl, err)
	}
	_, err = b.TryAcquire(ctx, key, rb)
	if h := heldBy(t, err); h.Holder != "b" {
		t.Errorf("the same attempt again: held by %q, want refused as the holder", h.Holder)
	}
}

// TestHandoffWaiterGivesUp: a waiter whose context ends gives up its
// place, and a lock handed to it that it did not collect, so the next
// waiter gets the lock.
func TestHandoffWaiterGivesUp(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	a, b, c := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	for _, handed := range []bool{false, true} {
		key := "gives-up-before"
		if handed {
			key = "gives-up-after"
		}
		ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		bctx, giveUp := context.WithCancel(ctx)
		_, err = b.TryAcquire(bctx, key, waitingRequest("b", time.Minute))
		heldBy(t, err)
		rc := waitingRequest("c", time.Minute)
		_, err = c.TryAcquire(ctx, key, rc)
		heldBy(t, err)
		if handed {
			if err := a.Release(ctx, ga); err != nil {
				t.Fatal(err)
			}
			if rec, err := a.Get(ctx, key); err != nil || rec.Holder != "b" {
				t.Fatalf("%s: after the release %+v, %v; want handed to b", key, rec, err)
			}
		}
		giveUp()
		if !handed {
			awaitNoPlace(t, ctx, srv.Addr(), a, key, "b")
			if err := a.Release(ctx, ga); err != nil {
				t.Fatal(err)
			}
		}
		// b's place is gone, and the lock handed to it too: it is c's.
		awaitHolder(t, ctx, a, key, "c")
		if _, err := c.TryAcquire(ctx, key, rc); err != nil {
			t.Errorf("%s: c after b gave up: %v", key, err)
		}
	}
}

// awaitNoPlace waits until holder has no place in key's FIFO.
func awaitNoPlace(t *testing.T, ctx context.Context, addr string, s *redisstore.Store, key, holder string) {
	t.Helper()
	c := newClient(t, addr)
	queued := redisstore.QueueKeys(s, key)[1]
	for {
		n, err := c.HExists(ctx, queued, holder).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still has a place in %s", holder, queued)
		case <-time.After(10 * time.Millisecond): // polls the server: the give-up runs in the background
		}
	}
}

// awaitHolder waits until key's record names holder.
func awaitHolder(t *testing.T, ctx context.Context, s *redisstore.Store, key, holder string) {
	t.Helper()
	for {
		rec, err := s.Get(ctx, key)
		if err == nil && rec.Holder == holder && rec.Remaining > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is not held by %s: %+v, %v", key, holder, rec, err)
		case <-time.After(10 * time.Millisecond): // polls the server: the give-up runs in the background
		}
	}
}

// TestHandoffNeedsNoAcks: with WithReplicaAcks a release does not hand the
// lock over (the notice would precede the replicas' acknowledgement): it
// reserves it, as for a waiter of an earlier version.
func TestHandoffNeedsNoAcks(t *testing.T) {
	url := testenv.StartRedisSentinel(t).URL()
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "handoff-acks"
	acked := func() *redisstore.Store {
		s, err := redisstore.Open(url, redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := acked(), acked()
	rb := waitingRequest("b", time.Minute)
	ga := handOver(t, ctx, key, a, b, rb)
	_, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if h := heldBy(t, err); h.Holder != "b" || h.Token != ga.Token {
		t.Errorf("after the release: %+v; want reserved for b, the token unchanged", h)
	}
	if _, err := b.TryAcquire(ctx, key, rb); err != nil {
		t.Errorf("b, for which the lock is reserved: %v", err)
	}
}

// refusalEnv is a lock held by "a" (grant ga, Store a) on a new Redis, and
// a Store w whose commands are counted (sent) and whose watch of the lock
// (changed) has seen a's acquisition.
type refusalEnv struct {
	ctx          context.Context
	addr, prefix string
	a, w         *redisstore.Store
	ga           backend.Grant
	sent         *counter
	changed      <-chan struct{}
}

func newRefusalEnv(t *testing.T, key string) refusalEnv {
	t.Helper()
	srv := testenv.StartRedis(t)
	e := refusalEnv{ctx: testCtx(t, 20*time.Second), addr: srv.Addr(), prefix: uniquePrefix()}
	e.a = newStore(t, e.addr, e.prefix)
	e.w, e.sent = countingStore(t, e.addr, e.prefix)
	var err error
	if e.changed, err = e.w.Watch(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	if e.ga, err = e.a.TryAcquire(e.ctx, key, request("a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	<-e.changed // a's acquisition
	return e
}

// TestWaiterRefusalFromLastAnswer: a waiting attempt right after a refused
// one, with nothing heard on the lock's channel in between, is answered
// from the last answer without a command (the engine's retry after its
// watch opens); once a notice arrives, the next attempt asks Redis.
func TestWaiterRefusalFromLastAnswer(t *testing.T) {
	const key = "refusal"
	e := newRefusalEnv(t, key)
	ctx, a, ga, b, sent, changed := e.ctx, e.a, e.ga, e.w, e.sent, e.changed
	rb := waitingRequest("b", time.Minute)
	_, err := b.TryAcquire(ctx, key, rb)
	first := heldBy(t, err)
	before := sent.n.Load()
	_, err = b.TryAcquire(ctx, key, rb)
	again := heldBy(t, err)
	if n := sent.n.Load() - before; n != 0 {
		t.Errorf("the attempt right after a refusal sent %d commands, want none", n)
	}
	if again.Holder != "a" || again.Token != ga.Token || again.RetryAfter <= 0 || again.RetryAfter > first.RetryAfter {
		t.Errorf("answered %+v after %+v; want the same holder and token, and no more time left", again, first)
	}
	// A forced release publishes a notice: the next attempt asks Redis.
	if err := a.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	<-changed
	if _, err := b.TryAcquire(ctx, key, rb); err != nil {
		t.Errorf("b after the forced release: %v", err)
	}
	if n := sent.n.Load() - before; n == 0 {
		t.Error("the attempt after a notice sent no command")
	}
}

// TestWaiterRefusalAfterHandoffToAnother: a release that hands the lock to
// another waiter does not send the next attempt to Redis (it cannot free
// the lock), and that attempt's answer names the new holder and its token.
func TestWaiterRefusalAfterHandoffToAnother(t *testing.T) {
	const key = "refusal-handoff"
	e := newRefusalEnv(t, key)
	ctx, a, ga, c, sent, changed := e.ctx, e.a, e.ga, e.w, e.sent, e.changed
	b := newStore(t, e.addr, e.prefix)
	rb, rc := waitingRequest("b", time.Minute), waitingRequest("c", time.Minute)
	_, err := b.TryAcquire(ctx, key, rb) // b's place comes first
	heldBy(t, err)
	_, err = c.TryAcquire(ctx, key, rc)
	first := heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	<-changed // the handoff to b
	before := sent.n.Load()
	_, err = c.TryAcquire(ctx, key, rc)
	again := heldBy(t, err)
	if n := sent.n.Load() - before; n != 0 {
		t.Errorf("the attempt after a handoff to another waiter sent %d commands, want none", n)
	}
	gb, err := b.TryAcquire(ctx, key, rb)
	if err != nil {
		t.Fatalf("b collects the lock handed to it: %v", err)
	}
	if again.Holder != "b" || again.Token != gb.Token || again.RetryAfter <= 0 || again.RetryAfter > time.Minute {
		t.Errorf("answered %+v after %+v; want holder b with token %d", again, first, gb.Token)
	}
}

// TestWatchingAttemptGetsReservation: an attempt queued only because its
// Store has a watch open (a Semaphore's slot, whose attempts each have a
// new nonce) is not handed the lock, which it could not collect: the
// release reserves the lock for its holder, who takes it with a new nonce.
func TestWatchingAttemptGetsReservation(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "watching-attempt"
	a, b, c := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	if _, err := b.Watch(ctx, key); err != nil {
		t.Fatal(err)
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, key, request("b", time.Minute))
	heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, key, request("c", time.Minute))
	if h := heldBy(t, err); h.Holder != "b" || h.Token != ga.Token {
		t.Errorf("after the release: %+v; want reserved for b, not handed (token %d)", h, ga.Token)
	}
	if _, err := b.TryAcquire(ctx, key, request("b", time.Minute)); err != nil {
		t.Errorf("b with a new nonce, for which the lock is reserved: %v", err)
	}
}

// TestHandoffChannels: a handoff to a waiter of this version is published
// on its holder's handoff channel and on the lock's, not on the notice
// channel that every waiting Store follows; a handoff to an earlier
// version's waiter (a place whose deadline has no leading zero) is
// published on the notice channel, which that version follows.
func TestHandoffChannels(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "handoff-channels"
	a, b := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	_, _, notify := a.Keys(key)
	handoffs := prefix + "{" + key + "}:handoffs"
	raw := newClient(t, srv.Addr())
	channels := []string{notify, handoffs, handoffs + ":b", handoffs + ":c"}
	sub := raw.Subscribe(ctx, channels...)
	defer sub.Close()
	for range channels {
		if _, err := sub.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}

	rb := waitingRequest("b", time.Minute)
	ga := handOver(t, ctx, key, a, b, rb)
	gb, err := b.TryAcquire(ctx, key, rb)
	if err != nil {
		t.Fatalf("b collects the lock handed to it: %v", err)
	}
	// c waits as an earlier version's Store does: its place has a TTL and
	// an owner, and a deadline without the leading zero.
	now, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	qk := redisstore.QueueKeys(b, key)
	ownerC := "3 xyzc" // nonce "xyz", holder "c"
	place := fmt.Sprintf("%d 60000 %s", now.Add(time.Minute).UnixMilli(), ownerC)
	if err := raw.RPush(ctx, qk[0], "c").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.HSet(ctx, qk[1], "c", place).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, gb); err != nil { // handed to c
		t.Fatal(err)
	}
	if err := a.ForceRelease(ctx, key); err != nil { // the last notice
		t.Fatal(err)
	}

	handedB := fmt.Sprintf("handed %d 60000 %d %sb", gb.Token, len(rb.Nonce), rb.Nonce)
	want := []string{
		notify + ": acquired " + strconv.FormatUint(ga.Token, 10),
		handoffs + ":b: " + handedB,
		handoffs + ": " + handedB,
		notify + ": handed ", // its token is the next one
		notify + ": released ",
	}
	var got []string
	for len(got) < len(want) {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, m.Channel+": "+m.Payload)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("notice %d: %q, want %q...", i, got[i], want[i])
		}
	}
	if !strings.HasSuffix(got[3], " 60000 "+ownerC) {
		t.Errorf("handoff to c: %q, want its TTL and owner", got[3])
	}
}

// TestHandoffOnNoticeChannelCollected: a handoff announced on the notice
// channel, as an earlier version's release announces every handoff (and
// this version's, to a place without the leading zero), reaches a waiting
// Store of this version, which collects the lock without a request.
func TestHandoffOnNoticeChannelCollected(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "handoff-notice-channel"
	a := newStore(t, srv.Addr(), prefix)
	b, sent := countingStore(t, srv.Addr(), prefix)
	woken, err := b.WatchWaiter(ctx, key, "b")
	if err != nil {
		t.Fatal(err)
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rb := waitingRequest("b", time.Minute)
	_, err = b.TryAcquire(ctx, key, rb)
	heldBy(t, err)
	// Drop the place's leading zero: the release then announces the
	// handoff on the notice channel.
	raw := newClient(t, srv.Addr())
	queued := redisstore.QueueKeys(a, key)[1]
	place, err := raw.HGet(ctx, queued, "b").Result()
	if err != nil || !strings.HasPrefix(place, "0") {
		t.Fatalf("b's place %q, %v; want one with the leading zero", place, err)
	}
	if err := raw.HSet(ctx, queued, "b", place[1:]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	awaitHandoff(t, ctx, woken)
	g := collectHanded(t, ctx, key, b, sent, rb)
	if rec, err := a.Get(ctx, key); err != nil || rec.Holder != "b" || rec.Token != g.Token || g.Token <= ga.Token {
		t.Errorf("record %+v, %v; grant %+v: want b's claim with the grant's token", rec, err, g)
	}
}
