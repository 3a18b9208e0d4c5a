package kubestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// A kubeconfig whose server is not a Kubernetes API server (a web server,
// a proxy's page, any JSON service) gives every operation an error
// matching backend.ErrMisconfigured that says so: never "not found" (which
// would read as a free lock), never an empty record, and never an error
// the engine retries for ever. A load balancer's 502 page stays a
// transient failure. The servers here stand for the wrong servers
// themselves; no Kubernetes behaviour is faked.
func TestWrongServer(t *testing.T) {
	html := func(code map[string]int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			if c, ok := code[r.Method]; ok {
				w.WriteHeader(c)
			}
			fmt.Fprint(w, "<!DOCTYPE HTML>\n<html><body>something else</body></html>")
		}
	}
	json := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	wrong := map[string]http.HandlerFunc{
		// python3 -m http.server: GET 404, other methods 501.
		"web server":   html(map[string]int{"GET": 404, "POST": 501, "PUT": 501, "DELETE": 501}),
		"405":          html(map[string]int{"GET": 404, "POST": 405, "PUT": 405, "DELETE": 405}),
		"login page":   html(nil), // 200 text/html for every request
		"JSON service": json(`{"status":"ok"}`),
		"JSON array":   json(`[1]`),
		"plain OK":     json(`OK`),
	}
	for name, h := range wrong {
		t.Run(name, func(t *testing.T) {
			for kind, st := range wrongServerStores(t, h) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := st.Get(ctx, "job")
				wantWrongServer(t, kind+" Get", err)
				_, err = st.TryAcquire(ctx, "job", backend.Request{Holder: "h", Nonce: "n", TTL: 10 * time.Second})
				wantWrongServer(t, kind+" TryAcquire", err)
				// The engine does not retry it: Lock returns it, not the deadline.
				mu, err := baton.NewMutex(st, "job")
				if err != nil {
					t.Fatal(err)
				}
				_, err = mu.Lock(ctx)
				wantWrongServer(t, kind+" Mutex.Lock", err)
				if ctx.Err() != nil {
					t.Fatalf("%s: Mutex.Lock retried until its deadline", kind)
				}
			}
		})
	}
	t.Run("body cut short", func(t *testing.T) {
		for kind, st := range wrongServerStores(t, json(`{"metadata":{"name":"job"`)) {
			_, err := st.Get(context.Background(), "job")
			if err == nil || errors.Is(err, ErrNotAPIServer) || errors.Is(err, backend.ErrNotFound) {
				t.Errorf("%s Get of a body cut short: %v, want a retried error", kind, err)
			}
		}
	})
	t.Run("load balancer 502", func(t *testing.T) {
		for kind, st := range wrongServerStores(t, html(map[string]int{"GET": 502, "POST": 502, "PUT": 502})) {
			_, err := st.Get(context.Background(), "job")
			if err == nil || errors.Is(err, backend.ErrMisconfigured) || errors.Is(err, backend.ErrNotFound) {
				t.Errorf("%s Get behind a 502: %v, want a transient error", kind, err)
			}
		}
	})
}

// wrongServerStores returns a store of each Kubernetes kind on a server
// that serves h.
func wrongServerStores(t *testing.T, h http.Handler) map[string]backend.Backend {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	lease, err := NewLeaseForConfig(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewConfigMapForConfig(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := NewDistributedLockForConfig(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]backend.Backend{"Lease": lease, "ConfigMap": cm, "DistributedLock": dl}
}

func wantWrongServer(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, backend.ErrMisconfigured) || errors.Is(err, backend.ErrNotFound) ||
		!strings.Contains(err.Error(), "not a Kubernetes API server") {
		t.Errorf("%s on a server that is not Kubernetes: %v; want an error matching ErrMisconfigured that says so", what, err)
	}
	if !errors.Is(err, ErrNotAPIServer) && !strings.Contains(err.Error(), "CRD is not installed") {
		t.Errorf("%s on a server that is not Kubernetes: %v; want ErrNotAPIServer (or, for a custom resource, the CRD's absence)", what, err)
	}
}
