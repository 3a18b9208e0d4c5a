package kubestore

import (
	"net/http"
	"net/url"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// throttleWindow is how recent a 429 must be for a request whose context
// ended to be reported as throttled: client-go waits out Retry-After
// (seconds, as API Priority and Fairness sends it) up to ten times.
const throttleWindow = 15 * time.Second

// clientNote holds what the store knows of its own client, to name the
// cause of a failure: its rate limiter, its proxy, and when the API server
// last answered it 429 Too Many Requests. client-go retries such an
// answer itself, after its Retry-After, so a request whose context ends
// meanwhile returns only the context's error: the note lets the store say
// that the API server answered, and throttled. A nil note knows nothing
// (a client the caller built, NewLease).
type clientNote struct {
	// limiter is the client's own rate limiter, which records the
	// requests waiting in it.
	limiter *waitingLimiter
	// proxy is the client's rest.Config.Proxy (a kubeconfig cluster's
	// proxy-url), which client-go uses instead of the environment's
	// proxy; nil if the client uses the environment's.
	proxy func(*http.Request) (*url.URL, error)

	mu   sync.Mutex
	last time.Time // this process's clock, monotonic reading included
}

// wrap returns rt noting the 429 answers it passes on.
func (n *clientNote) wrap(rt http.RoundTripper) http.RoundTripper {
	return noteTripper{n: n, rt: rt}
}

// noteTripper is wrap's round tripper. It shows client-go's wrappers
// outside it (a bearer token's, as in a pod, basic auth's, impersonation's)
// the transport it wraps (utilnet.RoundTripperWrapper): when an
// http.Client's Timeout (rest.Config.Timeout) ends a request, a watch
// included, they cancel it there, where without it client-go logs
// "Warning: unable to cancel request" naming this type.
type noteTripper struct {
	n  *clientNote
	rt http.RoundTripper
}

var _ utilnet.RoundTripperWrapper = noteTripper{}

func (t noteTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		t.n.mu.Lock()
		t.n.last = time.Now()
		t.n.mu.Unlock()
	}
	return resp, err
}

func (t noteTripper) WrappedRoundTripper() http.RoundTripper { return t.rt }

// recent reports whether a 429 came within throttleWindow.
func (n *clientNote) recent() bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.last.IsZero() && time.Since(n.last) < throttleWindow
}

// clientProxy is the proxy of the store's own client (rest.Config.Proxy),
// nil if it uses the environment's or the note knows nothing (a client
// the caller built).
func (n *clientNote) clientProxy() func(*http.Request) (*url.URL, error) {
	if n == nil {
		return nil
	}
	return n.proxy
}
