package redisstore_test

import (
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
)

// TestConformance runs the conformance suite on one redis-server; every
// subtest gets its own key prefix, and every client its own connection.
func TestConformance(t *testing.T) {
	srv := startRedis(t, 1)[0]
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			prefix := uniquePrefix()
			return func(t *testing.T) backend.Backend { return newStore(t, srv.Addr(), prefix) }
		},
	})
}

// TestConformanceRedlock runs the conformance suite on a Redlock over three
// redis-servers.
func TestConformanceRedlock(t *testing.T) {
	servers := startRedis(t, 3)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			prefix := uniquePrefix()
			return func(t *testing.T) backend.Backend { return newRedlock(t, servers, prefix) }
		},
	})
}
