package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/faultproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server, stopped at the end of t.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, deadline time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(deadline))
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		t.Fatalf("echo returned %q", line)
	}
	return time.Since(start), nil
}

func TestProxy(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	// Cut: nothing arrives, nothing is closed.
	p.Cut()
	if _, err := roundTrip(t, c, r, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while cut: %v, want a timeout", err)
	}
	// Restore: the held bytes are delivered in order.
	p.Restore()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("after Restore: %q, %v", line, err)
	}

	// Latency is added in each direction.
	p.SetLatency(50 * time.Millisecond)
	d, err := roundTrip(t, c, r, 5*time.Second)
	if err != nil || d < 100*time.Millisecond {
		t.Fatalf("with 50ms latency each way: round trip %v, %v; want at least 100ms", d, err)
	}
	p.SetLatency(0)

	// Reset closes the connection; new ones still work.
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after Reset succeeded")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, bufio.NewReader(c2), 5*time.Second); err != nil {
		t.Fatalf("a new connection after Reset: %v", err)
	}
}

// TestRetarget: connections opened after Retarget go to the new target;
// those opened before stay with the old one.
func TestRetarget(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldR := bufio.NewReader(old)
	if _, err := roundTrip(t, old, oldR, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	// A target where nothing listens: a new connection is closed at
	// once, the old one still works.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p.Retarget(dead)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(t, c, bufio.NewReader(c), 5*time.Second); err == nil {
		t.Fatalf("a connection after Retarget(%s), where nothing listens, got an answer", dead)
	}
	if _, err := roundTrip(t, old, oldR, 5*time.Second); err != nil {
		t.Fatalf("the connection opened before Retarget: %v", err)
	}

	p.Retarget(echo(t))
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, bufio.NewReader(c2), 5*time.Second); err != nil {
		t.Fatalf("a connection after Retarget to a live server: %v", err)
	}
}

// TestLoseReplies: every n-th reply never arrives and its connection is
// closed, after the target received the request; 0 ends it.
func TestLoseReplies(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	p.LoseReplies(2)
	c, r := dial()
	if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("the first reply: %v", err)
	}
	if _, err := roundTrip(t, c, r, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the second reply: %v, want its connection closed", err)
	}
	c, r = dial()
	if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("the third reply, on a new connection: %v", err)
	}
	p.LoseReplies(0)
	for i := range 3 {
		if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
			t.Fatalf("reply %d after LoseReplies(0): %v", i, err)
		}
	}
}

// TestDrop: a dropped connection forwards nothing and is not closed, while
// a connection opened after Drop works.
func TestDrop(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Drop()
	if _, err := roundTrip(t, c, r, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a dropped connection: %v, want a timeout", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, bufio.NewReader(c2), 5*time.Second); err != nil {
		t.Fatalf("a new connection after Drop: %v", err)
	}
	if _, err := roundTrip(t, c, r, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the dropped connection after a new one: %v, want a timeout", err)
	}
}
