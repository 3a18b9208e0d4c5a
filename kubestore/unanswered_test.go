package kubestore_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/rest"
)

// cutAnswers returns cfg with a transport that, once cut is set, sends
// the next write (POST, PUT) to the API server and then calls cut (which
// ends the caller's context) and drops the answer, as a context that ends
// while the answer is on its way does.
func cutAnswers(cfg *rest.Config, cut *atomic.Pointer[context.CancelFunc]) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err != nil || (r.Method != http.MethodPost && r.Method != http.MethodPut) {
				return resp, err
			}
			if cancel := cut.Swap(nil); cancel != nil {
				resp.Body.Close()
				(*cancel)()
				return nil, context.Canceled
			}
			return resp, err
		})
	})
	return cfg
}

// TestUnansweredAcquireReleased: a TryLock whose context ends after the
// API server applied its create (a new lock object) or its update (an
// existing one) on a Lease, a ConfigMap or a DistributedLock but before the answer came leaves no claim behind: the
// store releases it, and another process's TryLock succeeds at once
// instead of waiting out the lease duration.
func TestUnansweredAcquireReleased(t *testing.T) {
	cfg := crdPlane(t)
	ns := newNamespace(t)
	stores := map[string]func(*rest.Config) (backend.Backend, error){
		"lease": func(c *rest.Config) (backend.Backend, error) {
			return kubestore.NewLeaseForConfig(c, ns, kubestore.WithRateLimit(500, 1000))
		},
		"configmap": func(c *rest.Config) (backend.Backend, error) {
			return kubestore.NewConfigMapForConfig(c, ns, kubestore.WithRateLimit(500, 1000))
		},
		"crd": func(c *rest.Config) (backend.Backend, error) {
			return kubestore.NewDistributedLockForConfig(c, ns, kubestore.WithRateLimit(500, 1000))
		},
	}
	for kind, open := range stores {
		t.Run(kind, func(t *testing.T) {
			var cut atomic.Pointer[context.CancelFunc]
			cutStore, err := open(cutAnswers(cfg, &cut))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := baton.NewMutex(cutStore, "cut-"+kind, baton.WithTTL(time.Minute), baton.WithIdentity("a"))
			b, _ := baton.NewMutex(plain, "cut-"+kind, baton.WithTTL(time.Minute), baton.WithIdentity("b"))
			// The first TryLock creates the object, the second updates it.
			for _, write := range []string{"create", "update"} {
				ctx, cancel := context.WithCancel(context.Background())
				cut.Store(&cancel)
				_, err := a.TryLock(ctx)
				cancel()
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: TryLock whose answer was cut off: %v; want context.Canceled", write, err)
				}
				l, err := b.TryLock(context.Background())
				if err != nil {
					t.Fatalf("%s: the next TryLock: %v; want the lock (the unanswered claim released)", write, err)
				}
				if err := l.Unlock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
