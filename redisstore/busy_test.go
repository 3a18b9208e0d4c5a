package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
)

// TestBusyServer: a real server that cannot serve now (memory full, a long
// script running) answers with errors matching backend.ErrUnavailable
// that say why, so the engine and the CLI treat them as a store to wait
// for, not as an unknown failure.
func TestBusyServer(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 30*time.Second)
	admin := newClient(t, srv.Addr())
	s := openURL(t, srv.URL(), uniquePrefix())

	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.TryAcquire(ctx, "job", request("a", time.Minute))
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "reached maxmemory") {
		t.Errorf("TryAcquire with memory full: %v; want ErrUnavailable naming maxmemory", err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}

	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	looping := newClient(t, srv.Addr())
	done := make(chan error, 1)
	go func() { done <- looping.Eval(context.Background(), "while true do end", nil).Err() }()
	for {
		_, err = s.Get(ctx, "job")
		if err != nil && strings.Contains(err.Error(), "BUSY") || ctx.Err() != nil {
			break // polled: nothing tells when the script has started
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "a script or function is running") {
		t.Errorf("Get while a script runs: %v; want ErrUnavailable naming the script", err)
	}
	if err := admin.ScriptKill(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("the endless script returned no error after SCRIPT KILL")
	}
}

// A server that refuses a client at accept writes why and hangs up, which
// go-redis reports as a broken pipe or EOF: Get reads the refusal. In
// protected mode (no password, a client not on the loopback interface) it
// is a setup that cannot work; at maxclients, a busy server.
func TestRefusedAtAccept(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	full := testenv.StartRedis(t, testenv.RedisArgs("--maxclients", "1"))
	hog := newClient(t, full.Addr())
	if err := hog.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s := openURL(t, full.URL(), uniquePrefix())
	if _, err := s.Get(ctx, "job"); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "maxclients") {
		t.Errorf("Get from a server at maxclients: %v; want ErrUnavailable naming maxclients", err)
	}

	ip := nonLoopbackIPv4(t)
	guarded := testenv.StartRedis(t, testenv.RedisArgs("--bind", "127.0.0.1", ip, "--protected-mode", "yes"))
	_, port, _ := net.SplitHostPort(guarded.Addr())
	remote := openURL(t, "redis://"+net.JoinHostPort(ip, port), uniquePrefix())
	if _, err := remote.Get(ctx, "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "protected mode") {
		t.Errorf("Get from a protected-mode server over %s: %v; want ErrMisconfigured naming protected mode", ip, err)
	}
}

// nonLoopbackIPv4 returns an IPv4 address of this machine that is not a
// loopback one: a connection to it from here comes from it, which a
// protected-mode Redis refuses.
func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no IPv4 address but loopback ones: a protected-mode refusal needs one")
	return ""
}
