package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batonprom"
)

// statusServer serves baton run's health endpoints:
//
//	/healthz  200 while the supervisor runs
//	/readyz   200 while the supervisor runs (it is campaigning or leading)
//	/leader   200 only while this replica leads (its term is valid), 503 otherwise
//	/metrics  Prometheus metrics: baton's for the lock (package batonprom),
//	          the Go runtime's and the process's
//
// /leader is for scripts and monitoring; do not use it as a readiness
// probe: standbys would never be Ready, and a rolling update waits for
// new Pods to become Ready, so it would stall. Route a Service to the
// leader with --leader-label instead.
type statusServer struct {
	el      *baton.Elector
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}
	metrics *batonprom.Collector // the Elector's observer

	mu   sync.Mutex
	term *baton.Lease // the current term while leading, else nil
}

// listenStatus listens on addr for the status endpoints of lock name.
func listenStatus(addr, name string, log *slog.Logger) (*statusServer, error) {
	// A registry of our own, not the global one: what /metrics shows is
	// exactly what is registered here.
	reg := prometheus.NewRegistry()
	metrics, err := batonprom.New(reg)
	if err != nil {
		return nil, err
	}
	metrics.Init(name) // baton_leader 0, not absent, until the first attempt
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	s := &statusServer{ln: ln, done: make(chan struct{}), metrics: metrics}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /leader", s.leader)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		// A client that stops reading a response, or leaves a kept-alive
		// connection idle, must not hold a descriptor and a goroutine of
		// the supervisor for ever: net/http sets no bound by default.
		WriteTimeout: 30 * time.Second,
		IdleTimeout:  2 * time.Minute,
	}
	log.Info("serving /healthz, /readyz, /leader and /metrics", "addr", ln.Addr().String())
	return s, nil
}

// serve serves until shutdown; el answers who leads when this replica does not.
func (s *statusServer) serve(el *baton.Elector) {
	s.el = el
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed; the probes will say so
		}
	}()
}

func (s *statusServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

// started records a term; the term's end clears it at once, so /leader
// never says 200 after the lease's context ended.
func (s *statusServer) started(ctx context.Context, l *baton.Lease) {
	s.mu.Lock()
	s.term = l
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		if s.term == l {
			s.term = nil
		}
		s.mu.Unlock()
	})
}

func (s *statusServer) leader(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	l := s.term
	s.mu.Unlock()
	if l != nil && l.Err() == nil {
		fmt.Fprintf(w, "leading: %s holds %s with token %d\n", l.Holder(), l.Name(), l.Token())
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	leader := "unknown"
	if s.el != nil && s.el.Leader() != "" {
		leader = s.el.Leader()
	}
	fmt.Fprintf(w, "standby: the leader is %s\n", printable(leader))
}
