package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestCredentialsRefused: on a server whose default user is disabled (an
// ACL setup), a URL without a password and one with a password but no
// user are refused with ErrForbidden naming the URL form that works; they
// gave only Redis's NOAUTH and WRONGPASS, which do not say that a URL
// without a user logs in as default.
func TestCredentialsRefused(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--user", "default", "off", "--user", "locker", "on", ">pw", "~*", "&*", "+@all"))
	ctx := testCtx(t, 20*time.Second)
	for url, want := range map[string]string{
		"redis://" + srv.Addr():           "the URL gives none: write redis://USER:PASSWORD@HOST:PORT",
		"redis://:pw@" + srv.Addr():       "logs in as the user default",
		"redis://locker:no@" + srv.Addr(): "give an enabled ACL user and its password",
	} {
		s, err := redisstore.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Get(ctx, "job")
		_ = s.Close()
		if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want ErrForbidden saying %q", url, err, want)
		}
	}
}

// The password of the user a holder connects as is changed while it holds
// a lock (ACL SETUSER locker >new <old), and its connections drop (CLIENT
// KILL USER locker; a network fault or a restart does the same): every
// reconnection is refused with WRONGPASS. The renewal's error says that
// the user's password was changed, or the user disabled or deleted, while
// baton ran, and how to rotate a password. Before, it gave only the
// start-up advice (a URL without a user logs in as default), which sent a
// holder's operator to a URL that had worked for days.
func TestPasswordChangedWhileHeld(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--user", "locker", "on", ">old", "~*", "&*", "+@all"))
	ctx := testCtx(t, 20*time.Second)
	s, err := redisstore.Open("redis://locker:old@" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "a", Nonce: "n", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "locker", ">new", "<old").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "locker").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(ctx, g)
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "password was changed") {
		t.Errorf("renew after the password changed: %v; want ErrForbidden saying the password was changed", err)
	}
}
