package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/redisstore"
)

// A Sentinel topology and a Cluster that serve TLS only, given with the
// plain redis+sentinel:// and redis+cluster:// forms: the first read
// fails as a setup that cannot work, naming the TLS form of the URL.
// Before, it failed with a bare EOF, which the CLI retried as a server
// that does not answer and reported as unreachable (exit 69), where a
// one-server redis:// URL to a TLS port was named at once.
func TestTopologyPlainURLToTLS(t *testing.T) {
	_, sentinel, cluster := startTLSTopologies(t)
	ctx := testCtx(t, time.Minute)
	for _, tls := range []string{sentinel.URL(), cluster.URL()} {
		plain := strings.Replace(tls, "rediss+", "redis+", 1)
		s, err := redisstore.Open(plain)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		want := strings.SplitAfter(tls, "://")[0]
		if _, err := s.Get(ctx, "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s to servers that speak TLS only: %v, want ErrMisconfigured naming %s", plain, err, want)
		}
	}
}
