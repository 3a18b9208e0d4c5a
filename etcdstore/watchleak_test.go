package etcdstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
)

// serverWatchers reads etcd's count of watchers from its metrics port.
func serverWatchers(t *testing.T, metricsPort int) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("no etcd_debugging_mvcc_watcher_total in etcd's metrics")
	return 0
}

// settledWatchers is serverWatchers once it has not changed for a second
// (the watches just opened are confirmed), or after 20s.
func settledWatchers(t *testing.T, metricsPort int) int {
	t.Helper()
	n, since, deadline := serverWatchers(t, metricsPort), time.Now(), time.Now().Add(20*time.Second)
	for time.Since(since) < time.Second && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if m := serverWatchers(t, metricsPort); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// TestNoServerWatchersLeftBehind: waiters that come and go on many lock
// names, in fair mode, leave no watcher on the etcd server once they are
// gone. A watch cancelled before etcd confirmed it was forgotten by the
// etcd client without a cancel, and stayed on the server for as long as
// the client's watch stream lived (the soak walk saw 10 grow to 41 in 12
// minutes while baton held 7).
func TestNoServerWatchersLeftBehind(t *testing.T) {
	srv := startEtcd(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)))
	// A long-lived watch keeps the client's watch stream open, as a
	// process's other waiters do.
	keep, stop := context.WithCancel(t.Context())
	defer stop()
	if _, err := s.Watch(keep, "anchor"); err != nil {
		t.Fatal(err)
	}
	base := settledWatchers(t, srv.MetricsPort)
	ctx := t.Context()
	for round := range 40 {
		name := fmt.Sprintf("n%d", round)
		holder, err := baton.NewMutex(s, name, baton.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				m, _ := baton.NewMutex(s, name, baton.WithLogger(quietLog))
				wctx, cancel := context.WithTimeout(ctx, time.Duration(round%4)*time.Millisecond)
				defer cancel()
				if w, err := m.Lock(wctx); err == nil {
					_ = w.Unlock(ctx)
				}
			})
		}
		wg.Wait()
		_ = l.Unlock(ctx)
	}
	// Followers linger a while after their last waiter; then every watch
	// of these names is gone from the client.
	deadline := time.Now().Add(time.Minute)
	for {
		n := serverWatchers(t, srv.MetricsPort)
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd has %d watchers a minute after the waiters left, %d before they came", n, base)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
