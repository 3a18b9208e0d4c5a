package testenv

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// server is the process lifecycle that every test server (redis-server,
// etcd, postgres) shares: one process at a time, started by the server's
// own launch function and stopped with a signal, its log kept after it
// exits, and pause and resume for a frozen machine. Its methods are safe
// for concurrent use; RedisServer, Etcd and Postgres embed it.
type server struct {
	t    testing.TB
	kind string        // "redis-server", "etcd", "postgres", for messages
	addr func() string // the client address, for messages
	// launch starts a process and returns it once it serves. On failure it
	// returns the process it started, if any (killed), for Log.
	launch func() (*proc, error)
	// stopSig ends a process gracefully (Stop); after stopTimeout, if it
	// is positive, the process is killed.
	stopSig     syscall.Signal
	stopTimeout time.Duration

	mu     sync.Mutex
	proc   *proc // nil while stopped
	last   *proc // the latest process, for Log
	paused bool  // stopped with SIGSTOP (Pause), not yet continued
}

// Running reports whether the process is running: started, not stopped,
// and not exited on its own.
func (s *server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.hasExited()
}

// Start starts a stopped (or exited) server again with the same port and
// data, and returns once it serves. It fails the test if it cannot.
func (s *server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("testenv: restart %s on %s: %v", s.kind, s.addr(), err)
	}
}

func (s *server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.hasExited() {
		return errors.New("already running")
	}
	p, err := s.launch()
	if p != nil {
		s.last = p
	}
	if err != nil {
		return err
	}
	s.proc, s.paused = p, false
	return nil
}

// Stop ends the server gracefully (see each server's documentation) and
// waits for it to exit.
func (s *server) Stop() { s.stop(s.stopSig) }

// Kill kills the server with SIGKILL (a crash) and waits for it to exit.
func (s *server) Kill() { s.stop(syscall.SIGKILL) }

// Restart stops the server gracefully and starts it again.
func (s *server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// Log returns what the current (or last) process wrote to its log.
func (s *server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return ""
	}
	return s.last.log.String()
}

func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	p, paused := s.proc, s.paused
	s.proc, s.paused = nil, false
	s.mu.Unlock()
	if p == nil {
		return
	}
	if paused && sig != syscall.SIGKILL {
		// A stopped process handles other signals only once continued.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.stop(sig, s.stopTimeout)
}

// Pause stops the running process with SIGSTOP: it keeps its sockets but
// answers nothing, as a server whose machine or VM is frozen. Resume
// continues it. Pausing a stopped or paused server does nothing.
func (s *server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (s *server) Resume() { s.signal(syscall.SIGCONT, false) }

// Paused reports whether the process is paused.
func (s *server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *server) signal(sig syscall.Signal, pause bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.paused == pause {
		return
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		s.t.Errorf("testenv: %s on %s: %v: %v", s.kind, s.addr(), sig, err)
		return
	}
	s.paused = pause
}
