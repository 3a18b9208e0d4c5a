//go:build linux || darwin

package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// Issue 13: a lock's record deleted while it is held (rm NAME.json).

func removeRecord(t *testing.T, dir, key string) {
	t.Helper()
	if err := os.Remove(recordPath(dir, key)); err != nil {
		t.Fatal(err)
	}
}

func epochPath(dir, key string) string { return filepath.Join(dir, fileBase(key)+epochSuffix) }

// A standby that saw the claim is refused until the claim could have
// expired, even though it last looked before the holder's renew; the
// holder's renew reports the loss and never recreates the record; the next
// token is larger than every token before.
func TestDeletedWhileHeldWithContender(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	holder, standby := newStore(t, dir, clk), newStore(t, dir, clk)
	const ttl = 10 * time.Second

	var g backend.Grant
	for range 5 { // a few tenures, so that the token is not the first
		g = mustAcquire(t, holder, "job", req("a", baton.NewNonce(), ttl))
		if err := holder.Release(bg, g); err != nil {
			t.Fatal(err)
		}
	}
	g = mustAcquire(t, holder, "job", req("a", "n", ttl))
	_, err := standby.TryAcquire(bg, "job", req("b", "m", ttl))
	wantHeld(t, err, "a", g.Token, ttl)

	// The holder renews after the standby last looked; then the record
	// is deleted, and the standby finds it missing only later.
	clk.advance(3 * time.Second)
	if _, err := holder.Renew(bg, g); err != nil {
		t.Fatal(err)
	}
	renewedUntil, _ := clk.now()
	renewedUntil += int64(ttl)
	removeRecord(t, dir, "job")
	clk.advance(time.Second)

	var granted backend.Grant
	for i := 0; ; i++ {
		g2, err := standby.TryAcquire(bg, "job", req("b", "m", ttl))
		now, _ := clk.now()
		if err == nil {
			if now < renewedUntil {
				t.Fatalf("standby acquired %v before the deleted claim could have expired", time.Duration(renewedUntil-now))
			}
			granted = g2
			break
		}
		var held *backend.HeldError
		if !errors.As(err, &held) || held.Holder != "a" || held.Token != g.Token || held.RetryAfter <= 0 || held.RetryAfter > ttl {
			t.Fatalf("standby's TryAcquire after the deletion: %v (%+v), want HeldError naming a, token %d, 0 < RetryAfter <= %v", err, held, g.Token, ttl)
		}
		if i == 0 {
			// The holder learns of the loss at its renew, and does not
			// bring the record back.
			_, err := holder.Renew(bg, g)
			wantErr(t, err, backend.ErrLost, "gone")
			if _, err := os.Stat(recordPath(dir, "job")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("record after the holder's failed renew: %v, want none", err)
			}
		}
		if i > 20 {
			t.Fatal("standby never acquired")
		}
		clk.advance(ttl / 8)
	}
	if granted.Token <= g.Token {
		t.Fatalf("token after the deletion %d, want more than %d", granted.Token, g.Token)
	}
	if rec := mustGet(t, holder, "job"); rec.Holder != "b" || rec.Token != granted.Token {
		t.Fatalf("Get = %+v", rec)
	}
}

// The refusal counts from when the record was first seen missing, whoever
// saw it (Get included), plus the TTL: the holder may have renewed until
// just before the deletion.
func TestDeletedRecordRetryAfter(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	holder, standby := newStore(t, dir, clk), newStore(t, dir, clk)
	const ttl = 10 * time.Second
	g := mustAcquire(t, holder, "job", req("a", "n", ttl))
	if rec := mustGet(t, standby, "job"); !rec.Held() {
		t.Fatalf("Get = %+v", rec)
	}
	clk.advance(8 * time.Second) // the standby last saw 2 s left
	removeRecord(t, dir, "job")
	if rec := mustGet(t, standby, "job"); !rec.Held() || rec.Token != g.Token {
		t.Fatalf("Get after the deletion = %+v; want the claim its guard keeps", rec)
	}
	clk.advance(time.Second)
	_, err := standby.TryAcquire(bg, "job", req("b", "m", ttl))
	wantHeld(t, err, "a", g.Token, ttl-time.Second)
	clk.advance(ttl - time.Second - time.Nanosecond)
	_, err = standby.TryAcquire(bg, "job", req("b", "m", ttl))
	wantHeld(t, err, "a", g.Token, time.Nanosecond)
	clk.advance(time.Nanosecond)
	if g2 := mustAcquire(t, standby, "job", req("b", "m", ttl)); g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
}

// With no standby, the holder's renew fails with ErrLost and recreates
// nothing; the next acquisition, by anyone, gets a larger token. The
// holder's own Store, having seen its claim, waits for it to expire.
func TestDeletedWhileHeldNoStandby(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	s := newStore(t, dir, clk)
	const ttl = 10 * time.Second
	g := mustAcquire(t, s, "job", req("a", "n1", ttl))
	removeRecord(t, dir, "job")
	_, err := s.Renew(bg, g)
	wantErr(t, err, backend.ErrLost, "gone")
	wantErr(t, s.Release(bg, g), backend.ErrLost, "gone")
	if _, err := os.Stat(recordPath(dir, "job")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record after a failed renew and release: %v, want none", err)
	}
	_, err = s.TryAcquire(bg, "job", req("a", "n2", ttl))
	wantHeld(t, err, "a", g.Token, ttl)

	// The holder's release (its work has stopped) freed the claim in the
	// guard; a Store that never saw the record (a new process) acquires,
	// with a larger token. After each further deletion, a new Store finds
	// the deleted claim in the guard and waits it out; tokens keep growing.
	last := g.Token
	for i := range 4 {
		c := newStore(t, dir, clk)
		if i > 0 {
			_, err := c.TryAcquire(bg, "job", req("c", baton.NewNonce(), ttl))
			wantHeld(t, err, "c", last, ttl)
			clk.advance(ttl)
		}
		g2 := mustAcquire(t, c, "job", req("c", baton.NewNonce(), ttl))
		if g2.Token <= last {
			t.Fatalf("deletion %d: token %d after %d", i, g2.Token, last)
		}
		last = g2.Token
		removeRecord(t, dir, "job")
	}
	clk.advance(ttl)
	if g3 := mustAcquire(t, s, "job", req("a", "n3", ttl)); g3.Token <= last {
		t.Fatalf("token %d after %d", g3.Token, last)
	}
}

// Real clock, the lock engine, inotify: a standby blocked in Lock on its
// own Store wakes when the record is deleted, but acquires only after the
// claim it saw could have expired; the holder's lease ends with ErrLost.
func TestDeletedWhileHeldWithMutex(t *testing.T) {
	dir := t.TempDir()
	opts := []baton.Option{baton.WithTTL(2 * time.Second), baton.WithRenewDeadline(time.Second),
		baton.WithRetryPeriod(500 * time.Millisecond), baton.WithRenewInterval(300 * time.Millisecond)}
	m1, err := baton.NewMutex(newStore(t, dir, nil), "mutex", append(opts, baton.WithIdentity("one"))...)
	if err != nil {
		t.Fatal(err)
	}
	standby := newStore(t, dir, nil)
	m2, err := baton.NewMutex(standby, "mutex", append(opts, baton.WithIdentity("two"))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	l1, err := m1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.Lease, 1)
	go func() {
		l2, err := m2.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	// Wait until the standby has seen the claim.
	for {
		if _, err := m2.TryLock(ctx); errors.Is(err, backend.ErrHeld) {
			break
		} else if err != nil || ctx.Err() != nil {
			t.Fatalf("TryLock while held: %v", err)
		}
	}
	data := readBytes(t, recordPath(dir, "mutex"))
	removeRecord(t, dir, "mutex")
	r, err := decodeRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		return
	}
	defer l2.Unlock(ctx)
	if now, err := machineNow(); err != nil || now < r.expires {
		t.Fatalf("standby acquired %v before the deleted claim (token %d) expired (%v)", time.Duration(r.expires-now), r.token, err)
	}
	<-l1.Done()
	if !errors.Is(l1.Err(), backend.ErrLost) {
		t.Errorf("holder's lease ended with %v, want ErrLost", l1.Err())
	}
	if l2.Token() <= l1.Token() {
		t.Errorf("standby's token %d after %d", l2.Token(), l1.Token())
	}
}

// The epoch file: written when a record is created, once for a record that
// has none, and when n would overflow; never overwritten when corrupt; not
// listed as a lock.
func TestEpochFile(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	s := newStore(t, dir, clk)
	writeRecord := func(key string, token uint64) {
		t.Helper()
		r := validFree()
		r.key, r.token = key, token
		if err := os.WriteFile(recordPath(dir, key), r.encode(), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A record from before epoch files: its tokens continue, and deleting
	// it later does not make them repeat.
	writeRecord("old", 41)
	if g := mustAcquire(t, s, "old", req("h", "n", time.Second)); g.Token != 42 {
		t.Fatalf("token %d after 41", g.Token)
	}
	if e, found, err := readEpoch("old", epochPath(dir, "old")); err != nil || !found || e != 0 {
		t.Fatalf("epoch file of a record from before epoch files: %d, %v, %v", e, found, err)
	}
	removeRecord(t, dir, "old")
	clk.advance(time.Second) // the deleted claim, kept in the guard, ends
	if g := mustAcquire(t, newStore(t, dir, clk), "old", req("h", "n", time.Second)); g.Token != 1<<epochShift|1 {
		t.Fatalf("token after the deletion %d, want %d", g.Token, uint64(1<<epochShift|1))
	}

	// n overflows into the next epoch.
	writeRecord("full", nMask)
	if g := mustAcquire(t, s, "full", req("h", "n", time.Second)); g.Token != 1<<epochShift|1 {
		t.Fatalf("token after %d: %d", uint64(nMask), g.Token)
	}

	// A corrupt epoch file stops the lock and is left alone.
	mustAcquire(t, s, "bad", req("h", "n", time.Second))
	removeRecord(t, dir, "bad")
	clk.advance(time.Second)
	for _, junk := range []string{"", "{}", `{"version":1,"key":"bad","epoch":-1}`, `{"version":1,"key":"other","epoch":1}`,
		`{"version":1,"key":"bad","epoch":1,"x":0}`, `{"version":1,"key":"bad","epoch":1} {}`} {
		if err := os.WriteFile(epochPath(dir, "bad"), []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := newStore(t, dir, clk).TryAcquire(bg, "bad", req("h", "n", time.Second))
		wantErr(t, err, backend.ErrCorruptRecord, epochPath(dir, "bad"))
		if got := readBytes(t, epochPath(dir, "bad")); !bytes.Equal(got, []byte(junk)) {
			t.Fatalf("epoch file rewritten: %q", got)
		}
		if _, err := os.Stat(recordPath(dir, "bad")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("record written despite a corrupt epoch file %q", junk)
		}
	}

	// Deleting both files resets the counter (an administrator's choice).
	if err := os.Remove(epochPath(dir, "bad")); err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, newStore(t, dir, clk), "bad", req("h", "n", time.Second)); g.Token != 1 {
		t.Fatalf("token after deleting both files: %d, want 1", g.Token)
	}

	recs, err := s.List(bg)
	if err != nil || len(recs) != 3 {
		t.Fatalf("List = %+v, %v; want the three locks only", recs, err)
	}
	for _, n := range dirNames(t, dir) {
		if strings.HasSuffix(n, ".tmp") {
			t.Errorf("temporary file left: %s", n)
		}
	}
}

// A Store that never saw the record (a process started after the
// deletion) finds the claim in the guard and waits until it expires, on
// the machine's clock, with the holder's last renewal counted; the holder
// learns of the loss at its renew. ForceRelease frees a claim kept only
// in the guard.
func TestDeletedUnseenClaimHolds(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	holder := newStore(t, dir, clk)
	const ttl = 10 * time.Second
	g := mustAcquire(t, holder, "job", req("a", "n", ttl))
	clk.advance(4 * time.Second)
	g, err := holder.Renew(bg, g) // the claim now ends at 14 s
	if err != nil {
		t.Fatal(err)
	}
	removeRecord(t, dir, "job")
	clk.advance(3 * time.Second)
	late := newStore(t, dir, clk)
	_, err = late.TryAcquire(bg, "job", req("b", "m", ttl))
	wantHeld(t, err, "a", g.Token, 7*time.Second)
	if _, err := holder.Renew(bg, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's renew after the deletion: %v, want ErrLost", err)
	}
	clk.advance(7*time.Second - time.Nanosecond)
	_, err = late.TryAcquire(bg, "job", req("b", "m", ttl))
	wantHeld(t, err, "a", g.Token, time.Nanosecond)
	clk.advance(time.Nanosecond)
	g2 := mustAcquire(t, late, "job", req("b", "m", ttl))
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}

	removeRecord(t, dir, "job")
	if err := newStore(t, dir, clk).ForceRelease(bg, "job"); err != nil {
		t.Fatalf("ForceRelease of a claim kept only in the guard: %v", err)
	}
	g3 := mustAcquire(t, newStore(t, dir, clk), "job", req("c", "o", ttl))
	if g3.Token <= g2.Token {
		t.Fatalf("token %d after %d", g3.Token, g2.Token)
	}
	if err := newStore(t, dir, clk).ForceRelease(bg, "none"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("ForceRelease of a lock never taken: %v, want ErrNotFound", err)
	}
}

// A Store that tries many locks once each and finds them held (schedule's
// lock per slot) forgets the claims it saw there once their records show
// them ended, instead of keeping one per name for ever; it keeps, through
// every prune, a claim whose record shows it still live, and one whose
// record was deleted while held (or removed) for as long as that claim
// could be live, counted from the prune that found the record missing.
func TestSeenPrunedOnceEnded(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	holder, standby := newStore(t, dir, clk), newStore(t, dir, clk)
	const ttl = 10 * time.Second
	live := mustAcquire(t, holder, "live", req("a", "n1", ttl))
	gone := mustAcquire(t, holder, "gone", req("a", "n2", ttl))
	for _, g := range []backend.Grant{live, gone} {
		_, err := standby.TryAcquire(bg, g.Key, req("b", "m", ttl))
		wantHeld(t, err, "a", g.Token, ttl)
	}
	removeRecord(t, dir, "gone")

	var most int
	var goneMissing int64 // when a prune found gone's record missing
	for i := range 2*minSeenPrune + 10 {
		key := fmt.Sprintf("slot-%d", i)
		g := mustAcquire(t, holder, key, req("a", "n", ttl))
		if _, err := standby.TryAcquire(bg, key, req("b", "m", ttl)); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("standby's TryAcquire of %s: %v, want ErrHeld", key, err)
		}
		if err := holder.Release(bg, g); err != nil {
			t.Fatal(err)
		}
		clk.advance(ttl / 4) // the claims seen end as last seen
		var err error
		if live, err = holder.Renew(bg, live); err != nil {
			t.Fatal(err)
		}
		now, _ := clk.now()
		standby.seen.mu.Lock()
		most = max(most, len(standby.seen.m))
		keptLive, keptGone := standby.seen.m["live"], standby.seen.m["gone"]
		if keptGone != nil && keptGone.missing != 0 {
			goneMissing = keptGone.missing
		}
		standby.seen.mu.Unlock()
		if keptLive == nil {
			t.Fatalf("a prune forgot the live claim")
		}
		if keptGone == nil && (goneMissing == 0 || now < goneMissing+int64(ttl)) {
			t.Fatalf("a prune forgot the deleted claim while it could be live (found missing at %d, now %d)", goneMissing, now)
		}
	}
	standby.seen.mu.Lock()
	n, keptGone := len(standby.seen.m), standby.seen.m["gone"]
	standby.seen.mu.Unlock()
	if most > minSeenPrune+1 || n > minSeenPrune {
		t.Fatalf("claims seen: at most %d, %d at the end; want no more than %d", most, n, minSeenPrune+1)
	}
	if goneMissing == 0 || keptGone != nil {
		t.Fatalf("the deleted claim: found missing at %d, still kept at the end: %v; want found missing, then forgotten", goneMissing, keptGone)
	}
}
