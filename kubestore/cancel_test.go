package kubestore_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// TestTimeoutCancelsQuietly: a rest.Config with a Timeout cuts every
// request at it, watches too (client-go's http.Client), and a client
// whose credentials add a wrapper around the store's transport (a bearer
// token, as in a pod; impersonation here) cancels the request through
// the wrappers. The store's own wrapper hid the transport from them, so
// client-go logged "Warning: unable to cancel request" naming a kubestore
// type at each cut of a waiter's watch.
func TestTimeoutCancelsQuietly(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bind(t, ns, "timeout-user", shippedRole(t))
	cfg := controlPlane(t)
	cfg.Timeout = time.Second
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "timeout-user"}
	s := newLease(t, cfg, ns)
	var (
		mu   sync.Mutex
		logs []string
	)
	// client-go logs through the logger of the request's context, which
	// the watch keeps from the caller's.
	ctx := klog.NewContext(t.Context(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, prefix+args)
	}, funcr.Options{}))
	if _, err := s.TryAcquire(ctx, "job", req("pod-a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// The store notifies its subscribers each time its watch is up: at
	// the start, then after each cut at the Timeout.
	const cuts = 4
	for range cuts + 1 {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the watch was not up again within 30s")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range logs {
		if strings.Contains(l, "unable to cancel request") {
			t.Errorf("after %d watches cut at the rest.Config's Timeout, client-go logged: %s", cuts, l)
		}
	}
}
