package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
)

// A waiter whose Store can no longer connect (its member reissued a
// certificate by a CA its bundle lacks: the old CA removed before the
// members were reissued) ends its Lock with the failed verification,
// naming the CA file and matching backend.ErrMisconfigured, as its
// holder's loss does, and no attempt is answered "held" once the
// connections were down for a renew deadline. Before, the waiter's
// attempts were answered "held" from what its watch had last seen, a
// watch that the etcd client resumes silently while no connection can be
// made: in plain mode Lock waited, logging nothing, until its context
// ended, for a holder that had stepped down; in fair mode until the
// waiter's lease ended, a TTL after its last keepalive.
//
// A watched waiter is retried by its engine only every TTL: at a long
// TTL its Store wakes it once the connection has been down for a second,
// so that it ends well within the TTL (before, in fair mode, it waited
// for its lease's end).
func TestCAMismatchEndsWaiter(t *testing.T) {
	for _, c := range []struct {
		name string
		fair bool
		ttl  time.Duration
	}{{"fair", true, 2 * time.Second}, {"plain", false, 2 * time.Second}, {"fair-long-TTL", true, 30 * time.Second}} {
		t.Run(c.name, func(t *testing.T) { caMismatchEndsWaiter(t, c.fair, c.ttl) })
	}
}

func caMismatchEndsWaiter(t *testing.T, fair bool, ttl time.Duration) {
	old, proxy, reissue := startReissued(t)
	prefix := freshPrefix(t)
	open := func() *etcdstore.Store {
		s, err := etcdstore.OpenStore(t.Context(), etcdstore.Config{Endpoints: []string{"https://" + proxy.Addr()}, CAFile: old.CAFile},
			etcdstore.WithLogger(quietLog), etcdstore.WithPrefix(prefix), etcdstore.WithFair(fair))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	holder := lock(t, newMutex(t, open(), "job", "holder", 2*time.Second))
	// The third answer comes from the engine's periodic retry, a TTL
	// after the second, once the watch is established: the Store then
	// answers from what the watch shows. At a long TTL the second (the
	// engine retries at once when its watch opens) must do.
	nth, bound := 3, 30*time.Second
	if ttl > 10*time.Second {
		nth, bound = 2, 20*time.Second
	}
	answers := &heldAnswers{nth: nth, reached: make(chan time.Time, 1)}
	heldOpt := baton.WithObserver(answers)
	// The context outlasts the wait below: only the Store's own
	// verdict ends Lock within it.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	waiter := lockAsync(t, ctx, newMutex(t, open(), "job", "waiter", ttl, heldOpt))
	within(t, 20*time.Second, fmt.Sprintf("the waiter to find the lock held %d times", nth), answers.reached)

	reissue()
	within(t, 20*time.Second, "the holder to step down", holder.Done())
	down := time.Now() // the connections down for a renew deadline
	got := within(t, bound, "the waiter's Lock to end", waiter)
	if n := answers.since(down); n > 0 {
		t.Errorf("the waiter's attempts were answered \"held\" %d times after every connection was down for a renew deadline", n)
	}
	if got.err == nil {
		t.Fatal("the waiter acquired the lock from a member it cannot verify")
	}
	if !errors.Is(got.err, backend.ErrMisconfigured) || errors.Is(got.err, backend.ErrHeld) || !strings.Contains(got.err.Error(), old.CAFile) {
		t.Errorf("the waiter's Lock: %v, want ErrMisconfigured naming %s, not ErrHeld", got.err, old.CAFile)
	}
}

// startReissued starts a member over TLS, behind a fault proxy, that
// presents a certificate of old's CA; reissue has it present one of
// another CA instead (etcd reads its files at each handshake) and resets
// every connection through the proxy.
func startReissued(t *testing.T) (old testenv.RedisTLS, proxy *faultproxy.Proxy, reissue func()) {
	t.Helper()
	old, _ = testenv.WriteTLSFiles(t)
	other, _ := testenv.WriteTLSFiles(t)
	dir := t.TempDir()
	served := testenv.EtcdTLS{CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), CAFile: old.CAFile}
	testenv.InstallFile(t, served.CertFile, old.CertFile)
	testenv.InstallFile(t, served.KeyFile, old.KeyFile)
	srv := startEtcd(t, testenv.WithEtcdTLS(served))
	proxy = startFaultProxy(t, srv.Addr())
	return old, proxy, func() {
		testenv.InstallFile(t, served.KeyFile, other.KeyFile)
		testenv.InstallFile(t, served.CertFile, other.CertFile)
		proxy.Reset()
	}
}

// heldAnswers is an observer that records when a waiter's attempts found
// the lock held.
type heldAnswers struct {
	nth     int
	reached chan time.Time // receives the time of the nth answer

	mu sync.Mutex
	at []time.Time
}

func (h *heldAnswers) Observe(e baton.Event) {
	if e.Kind != baton.EventHeld {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at = append(h.at, time.Now())
	if len(h.at) == h.nth {
		h.reached <- h.at[h.nth-1]
	}
}

// since counts the answers after t.
func (h *heldAnswers) since(t time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, at := range h.at {
		if at.After(t) {
			n++
		}
	}
	return n
}
