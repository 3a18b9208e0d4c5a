package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

// removals is a memory store that reports each Remove call on calls, and
// answers every call with err if it is set (and every Release with
// releaseErr).
type removals struct {
	*memstore.Store
	err, releaseErr error
	calls           chan removal
}

func (r *removals) Release(ctx context.Context, g backend.Grant) error {
	if r.releaseErr != nil {
		return r.releaseErr
	}
	return r.Store.Release(ctx, g)
}

type removal struct {
	key string
	err error
}

func newRemovals(s *memstore.Store, err error) *removals {
	return &removals{Store: s, err: err, calls: make(chan removal, 16)}
}

func (r *removals) Remove(ctx context.Context, key string) error {
	err := r.err
	if err == nil {
		err = r.Store.Remove(ctx, key)
	}
	r.calls <- removal{key, err}
	return err
}

// next returns the next Remove call, failing the test if none comes in 10s.
func (r *removals) next(t *testing.T) removal {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no Remove call within 10s")
		return removal{}
	}
}

// A slot's lock record is removed once the slot is recorded and its lock
// released after LockAtLeastFor, not before; a replica whose clock is
// behind by more than that creates the record again (with a larger
// token), finds the slot done and removes the record in turn.
func TestSlotLockRemovedAfterLockAtLeastFor(t *testing.T) {
	env := newFakeEnv(t0.Add(30 * time.Second))
	slot := t0.Add(time.Minute)
	key, _ := schedule.LockName("report", slot)
	spy := newRemovals(env.store, nil)
	cnt := newCounter()
	onTime, late := newRecorder(), newRecorder()
	a := env.replicaOn(t, spy, "on-time", 0, schedule.WithObserver(onTime.observe))
	b := env.replicaOn(t, spy, "late", -15*time.Second, schedule.WithObserver(late.observe))
	for _, s := range []*schedule.Scheduler{a, b} {
		if err := s.Add("report", "* * * * *", cnt.job, schedule.LockAtLeastFor(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		start(t, s)
	}
	awaitWaiters(t, env.wall, 2)

	env.wall.Step(30 * time.Second) // on-time reaches the slot
	ran := onTime.expect(t, slot, schedule.Ran)
	awaitWaiters(t, env.wall, 3) // two loops and on-time's hold
	if rec, err := env.store.Get(context.Background(), key); err != nil || !rec.Held() {
		t.Fatalf("slot lock during LockAtLeastFor: %+v, %v; want held", rec, err)
	}
	select {
	case c := <-spy.calls:
		t.Fatalf("Remove(%q) during LockAtLeastFor", c.key)
	default:
	}

	env.wall.Step(10 * time.Second) // LockAtLeastFor ends
	if c := spy.next(t); c.key != key || c.err != nil {
		t.Fatalf("Remove(%q) = %v, want Remove(%q) = nil", c.key, c.err, key)
	}
	if _, err := env.store.Get(context.Background(), key); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("Get after the removal: %v, want ErrNotFound", err)
	}

	env.wall.Step(5 * time.Second) // late reaches the slot
	again := late.expect(t, slot, schedule.AlreadyDone)
	if again.Token <= ran.Token {
		t.Errorf("token %d of the slot's recreated lock, want more than the removed one's %d", again.Token, ran.Token)
	}
	if c := spy.next(t); c.key != key || c.err != nil {
		t.Fatalf("late replica: Remove(%q) = %v, want Remove(%q) = nil", c.key, c.err, key)
	}
	if n := cnt.get(slot); n != 1 {
		t.Errorf("slot ran %d times, want once", n)
	}
}

// A slot whose job failed has its lock record removed too, after
// LockAtLeastFor (on Kubernetes, a record left per failed run would count
// against a ResourceQuota for ever); a replica whose clock is behind runs
// the slot again, as it would with the record kept, with a larger token,
// and removes the record in turn.
func TestFailedSlotLockRemoved(t *testing.T) {
	env := newFakeEnv(t0.Add(30 * time.Second))
	slot := t0.Add(time.Minute)
	key, _ := schedule.LockName("report", slot)
	spy := newRemovals(env.store, nil)
	cnt := newCounter()
	failing := func(context.Context, schedule.Run) error { return errors.New("disk full") }
	onTime, late := newRecorder(), newRecorder()
	a := env.replicaOn(t, spy, "on-time", 0, schedule.WithObserver(onTime.observe))
	b := env.replicaOn(t, spy, "late", -15*time.Second, schedule.WithObserver(late.observe))
	if err := a.Add("report", "* * * * *", failing, schedule.LockAtLeastFor(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.Add("report", "* * * * *", cnt.job, schedule.LockAtLeastFor(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	start(t, a)
	start(t, b)
	awaitWaiters(t, env.wall, 2)

	env.wall.Step(30 * time.Second) // on-time reaches the slot, and fails
	failed := onTime.expect(t, slot, schedule.Failed)
	awaitWaiters(t, env.wall, 3)    // two loops and on-time's hold
	env.wall.Step(10 * time.Second) // LockAtLeastFor ends
	if c := spy.next(t); c.key != key || c.err != nil {
		t.Fatalf("Remove(%q) = %v, want Remove(%q) = nil", c.key, c.err, key)
	}
	if _, err := env.store.Get(context.Background(), key); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("Get after the failed slot's removal: %v, want ErrNotFound", err)
	}

	env.wall.Step(5 * time.Second) // late reaches the slot, not recorded
	again := late.expect(t, slot, schedule.Ran)
	if again.Token <= failed.Token {
		t.Errorf("token %d of the slot's recreated lock, want more than the removed one's %d", again.Token, failed.Token)
	}
	if n := cnt.get(slot); n != 1 {
		t.Errorf("late replica ran the failed slot %d times, want once", n)
	}
}

// runOneSlot runs the slot t0+1m of a job on a replica over spy with
// opts, stops the replica (Run waits for the slot's release), checks that
// it never called Remove (why says when that would be wrong), and returns
// the lock's record.
func runOneSlot(t *testing.T, env *fakeEnv, spy *removals, why string, opts ...schedule.Option) (backend.Record, error) {
	t.Helper()
	slot := t0.Add(time.Minute)
	rec := newRecorder()
	s := env.replicaOn(t, spy, "r", 0, append(opts, schedule.WithObserver(rec.observe))...)
	if err := s.Add("report", "* * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(30 * time.Second)
	rec.expect(t, slot, schedule.Ran)
	stop()
	select {
	case c := <-spy.calls:
		t.Fatalf("Remove(%q) %s", c.key, why)
	default:
	}
	key, _ := schedule.LockName("report", slot)
	return env.store.Get(context.Background(), key)
}

// KeepSlotLocks keeps the released record of every slot's lock.
func TestKeepSlotLocks(t *testing.T) {
	env := newFakeEnv(t0.Add(30 * time.Second))
	spy := newRemovals(env.store, nil)
	if r, err := runOneSlot(t, env, spy, "with KeepSlotLocks", schedule.KeepSlotLocks()); err != nil || r.Held() {
		t.Fatalf("slot lock after the run: %+v, %v; want a released record", r, err)
	}
}

// A claim that the release could not clear (the store did not answer)
// is not removed: it stays, and expires.
func TestSlotLockKeptWhenReleaseFails(t *testing.T) {
	env := newFakeEnv(t0.Add(30 * time.Second))
	spy := newRemovals(env.store, nil)
	spy.releaseErr = fmt.Errorf("release: %w", backend.ErrUnavailable)
	if r, err := runOneSlot(t, env, spy, "after a failed release"); err != nil || !r.Held() {
		t.Fatalf("slot lock after a failed release: %+v, %v; want the claim still recorded", r, err)
	}
}

// A store that refuses removals for lack of permission gets one warning
// per scheduler, not one per slot, and the slots still run.
func TestSlotLockRemovalForbidden(t *testing.T) {
	env := newFakeEnv(t0)
	forbidden := fmt.Errorf("kube: delete leases: %w", backend.ErrForbidden)
	spy := newRemovals(env.store, forbidden)
	logs := &levels{}
	rec := newRecorder()
	s := env.replicaOn(t, spy, "r", 0, schedule.WithObserver(rec.observe), schedule.WithLogger(slog.New(logs)))
	if err := s.Add("report", "* * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	for i := 1; i <= 3; i++ {
		awaitWaiters(t, env.wall, 1)
		env.wall.Step(time.Minute)
		rec.expect(t, t0.Add(time.Duration(i)*time.Minute), schedule.Ran)
		if c := spy.next(t); !errors.Is(c.err, backend.ErrForbidden) {
			t.Fatalf("Remove = %v, want the store's refusal", c.err)
		}
	}
	stop() // the last refusal is logged after the store answered
	warn, debug := logs.count(slog.LevelWarn, "remove slot lock records"), logs.count(slog.LevelDebug, "remove slot lock records")
	if warn != 1 || debug != 2 {
		t.Errorf("%d warnings and %d debug lines about the refused removals, want 1 and 2", warn, debug)
	}
}

// levels is a slog.Handler that keeps the level and message of each record.
type levels struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *levels) Enabled(context.Context, slog.Level) bool { return true }
func (h *levels) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *levels) WithGroup(string) slog.Handler            { return h }

func (h *levels) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

// count returns how many records at lvl have a message containing text.
func (h *levels) count(lvl slog.Level, text string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == lvl && strings.Contains(r.Message, text) {
			n++
		}
	}
	return n
}
