package kubestore_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/rest"
)

// requestLog counts a client's requests to the API server by kind: watch
// requests apart from the others.
type requestLog struct {
	mu      sync.Mutex
	watches int
	others  []string
	watched chan struct{} // closed at the first watch request
}

func (r *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		if req.URL.Query().Get("watch") == "true" {
			r.watches++
			if r.watches == 1 {
				close(r.watched)
			}
		} else {
			r.others = append(r.others, req.Method+" "+req.URL.Path)
		}
		r.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (r *requestLog) nonWatch() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.others...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestIdleStandbyMakesNoRequests: while the leader renews, a standby
// waiting in Lock sends nothing but its watch, on both object kinds, and
// still takes over at once when the leader releases.
func TestIdleStandbyMakesNoRequests(t *testing.T) {
	for _, k := range []struct {
		name string
		open func(t *testing.T, cfg *rest.Config, ns string) backend.Backend
	}{
		{"lease", func(t *testing.T, cfg *rest.Config, ns string) backend.Backend { return newLease(t, cfg, ns) }},
		{"configmap", func(t *testing.T, cfg *rest.Config, ns string) backend.Backend {
			s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(200, 400))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			renewed := make(chan struct{}, 64)
			opts := []baton.Option{baton.WithTTL(2 * time.Second), quiet}
			leader, err := baton.NewMutex(k.open(t, cfg, ns), "idle", append(opts, baton.WithIdentity("pod-a"),
				baton.WithObserver(baton.ObserverFunc(func(ev baton.Event) {
					if ev.Kind == baton.EventRenewed {
						select {
						case renewed <- struct{}{}:
						default:
						}
					}
				})))...)
			if err != nil {
				t.Fatal(err)
			}
			log := &requestLog{watched: make(chan struct{})}
			scfg := rest.CopyConfig(cfg)
			scfg.Wrap(log.wrap)
			standby, err := baton.NewMutex(k.open(t, scfg, ns), "idle", append(opts, baton.WithIdentity("pod-b"))...)
			if err != nil {
				t.Fatal(err)
			}
			l, err := leader.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var sl *baton.Lease
			go func() {
				var err error
				sl, err = standby.Lock(ctx)
				done <- err
			}()
			awaitRenewals := func(n int) {
				t.Helper()
				for range n {
					select {
					case <-renewed:
					case <-time.After(10 * time.Second):
						t.Fatal("the leader stopped renewing")
					}
				}
			}
			select {
			case <-log.watched:
			case <-time.After(10 * time.Second):
				t.Fatal("the standby never opened a watch")
			}
			awaitRenewals(2) // the standby's setup (reads, its retry) is over
			before := log.nonWatch()
			// Six renewals at TTL/3 span two TTLs: the standby's own retry
			// at the claim's first possible expiry falls inside.
			awaitRenewals(6)
			if after := log.nonWatch(); len(after) != len(before) {
				t.Errorf("the idle standby sent %d requests while the leader renewed 6 times: %v", len(after)-len(before), after[len(before):])
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if sl.Token() <= l.Token() {
					t.Errorf("token %d after %d", sl.Token(), l.Token())
				}
				_ = sl.Unlock(context.Background())
			case <-time.After(5 * time.Second):
				t.Fatal("the standby did not take over after the release")
			}
		})
	}
}
