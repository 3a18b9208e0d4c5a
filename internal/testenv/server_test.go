package testenv

import (
	"syscall"
	"testing"
	"time"
)

// TestServerExitedOnItsOwn: a server whose process died without Stop or
// Kill (a crash, an OOM kill) reports not running, and Start starts it
// again.
func TestServerExitedOnItsOwn(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("redis-server did not exit after SIGKILL")
	}
	if r.Running() {
		t.Fatal("Running() after the process exited")
	}
	r.Start()
	if !r.Running() {
		t.Fatal("Running() = false after Start")
	}
	if _, err := redisCall(r.Addr(), "PING"); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}
