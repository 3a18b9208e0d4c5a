package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
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
