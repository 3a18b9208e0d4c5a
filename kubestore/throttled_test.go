package kubestore_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/rest"
)

// TestThrottled: an API server that throttles the requests for a lock
// (429 Too Many Requests with Retry-After, as API Priority and Fairness
// answers) for longer than client-go's retries gives an error matching
// backend.ErrUnavailable that says so and names the fix; it was an
// unclassified error, so baton status exited 1 with only "Too many
// requests, please try again later.", and baton doctor said nothing of
// throttling; nor did an error whose context ended while client-go waited
// out a Retry-After. A reverse proxy in front of the real API server answers 429
// for the lock object (with Retry-After: 0 first, so that client-go's ten
// retries come at once), and passes every other request.
func TestThrottled(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	up, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.Transport = rt
	var retryAfter atomic.Value
	retryAfter.Store("0")
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/leases/x") {
			rp.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", retryAfter.Load().(string))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",`+
			`"message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":0},"code":429}`)
	}))
	t.Cleanup(proxy.Close)
	pcfg := &rest.Config{Host: proxy.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}),
	}}
	s, err := kubestore.NewLeaseForConfig(pcfg, ns, kubestore.WithRateLimit(200, 400))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(t.Context(), "x")
	t.Logf("the error: %v", err)
	if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, kubestore.ErrThrottled) || !strings.Contains(err.Error(), "FlowSchema") {
		t.Errorf("Get of a throttled lock: %v; want ErrUnavailable and ErrThrottled, naming the fix", err)
	}

	// Retry-After: 1, and a deadline that ends while client-go waits it
	// out: the context's error alone said nothing of the 429s (baton
	// doctor: "no answer in time", check the address and the network).
	retryAfter.Store("1")
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err = s.Get(ctx, "x")
	t.Logf("the error: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, kubestore.ErrThrottled) || !strings.Contains(err.Error(), "429") {
		t.Errorf("Get of a throttled lock cut short by its deadline: %v; want DeadlineExceeded and ErrThrottled, saying 429", err)
	}
}
