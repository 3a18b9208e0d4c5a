package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestTwemproxyNamed: twemproxy (nutcracker 0.5.0) closes a client's
// connection at HELLO, which go-redis v9 sends first on every connection,
// so a Store opened on its address can do nothing. A read and a blocking
// Lock through it fail at once as a misconfiguration that names
// twemproxy and the fix; they failed as an unavailable store ("EOF: the
// server closed the connection: a restart, a proxy, ..."), which the
// engine and the CLI retry until their deadline.
func TestTwemproxyNamed(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.StartTwemproxy(t, testenv.TwemproxyConfig{Servers: []string{srv.Addr()}})
	ctx := testCtx(t, 30*time.Second)
	s, err := redisstore.Open(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Get(ctx, "job")
	checkNamesTwemproxy(t, "Get", err)
	m, err := baton.NewMutex(s, "job", baton.WithIdentity("behind-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if l != nil {
		l.Unlock(ctx)
	}
	checkNamesTwemproxy(t, "Lock", err)
	if ctx.Err() != nil {
		t.Errorf("Lock returned only at its deadline: %v", err)
	}
}

// TestTwemproxyAuthNamed: a twemproxy with redis_auth answers PING with
// NOAUTH, not PONG, to a client that has not authenticated; it is
// recognised all the same. It was taken for a server restarting (an
// unavailable store, EOF), as before the check.
func TestTwemproxyAuthNamed(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--requirepass", "pw"))
	proxy := testenv.StartTwemproxy(t, testenv.TwemproxyConfig{Servers: []string{srv.Addr()}, RedisAuth: "pw"})
	s, err := redisstore.Open("redis://:pw@" + proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Get(testCtx(t, 30*time.Second), "job")
	checkNamesTwemproxy(t, "Get", err)
}

func checkNamesTwemproxy(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "twemproxy") || !strings.Contains(err.Error(), "HELLO") {
		t.Errorf("%s through twemproxy: %v; want ErrMisconfigured naming twemproxy and HELLO", op, err)
	}
}

// TestClosedAtHelloNotTwemproxy: a server that closes every connection
// at once (one going down) is unavailable, as before, and not taken for
// twemproxy: it does not answer the PING that twemproxy answers.
func TestClosedAtHelloNotTwemproxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()
	s, err := redisstore.Open("redis://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Get(ctx, "job")
	if !errors.Is(err, backend.ErrUnavailable) || strings.Contains(err.Error(), "twemproxy") {
		t.Errorf("Get from a server that closes every connection: %v; want ErrUnavailable, not twemproxy", err)
	}
}

// TestNewClientChecksIdleConnections: a pooled connection that the server
// closed while it sat idle (CLIENT KILL, as a restart or a proxy's idle
// timeout does) is found dead by the pool's check and replaced, through
// NewClient's hook as without it; the next command does not get the EOF.
func TestNewClientChecksIdleConnections(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := t.Context()
	c := redisstore.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1})
	defer c.Close()
	id, err := c.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the first command after the idle connection was killed: %v (want the pool to have replaced it)", err)
	}
	if s := c.PoolStats(); s.StaleConns != 1 {
		t.Errorf("PoolStats().StaleConns = %d, want 1 (the killed connection found dead by the pool's check)", s.StaleConns)
	}
}
