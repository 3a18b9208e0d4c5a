package kubestore

import (
	"net/http"
	"sync"
	"time"
)

// throttleWindow is how recent a 429 must be for a request whose context
// ended to be reported as throttled: client-go waits out Retry-After
// (seconds, as API Priority and Fairness sends it) up to ten times.
const throttleWindow = 15 * time.Second

// throttleNote remembers when the API server last answered the store's
// client 429 Too Many Requests. client-go retries such an answer itself,
// after its Retry-After, so a request whose context ends meanwhile
// returns only the context's error: the note lets the store say that the
// API server answered, and throttled. A nil note knows nothing (a client
// the caller built, NewLease).
type throttleNote struct {
	mu   sync.Mutex
	last time.Time // this process's clock, monotonic reading included
}

// wrap returns rt noting the 429 answers it passes on.
func (n *throttleNote) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			n.mu.Lock()
			n.last = time.Now()
			n.mu.Unlock()
		}
		return resp, err
	})
}

// recent reports whether a 429 came within throttleWindow.
func (n *throttleNote) recent() bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.last.IsZero() && time.Since(n.last) < throttleWindow
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
