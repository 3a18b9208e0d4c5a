package redisstore_test

import (
	"context"
	"errors"
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
