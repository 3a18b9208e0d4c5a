package etcdstore_test

import (
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/etcdstore"
)

// conformance runs the batontest suite against one real etcd, each subtest
// under its own key prefix, each client a Store on its own etcd client (as
// another process would be).
func conformance(t *testing.T, opts ...etcdstore.Option) {
	srv := startEtcd(t)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			prefix := freshPrefix(t)
			return func(t *testing.T) backend.Backend {
				return newStore(t, connect(t, srv.Endpoint()), append([]etcdstore.Option{etcdstore.WithPrefix(prefix)}, opts...)...)
			}
		},
	})
}

// TestConformance runs the suite in fair mode, the default.
func TestConformance(t *testing.T) { conformance(t) }

func TestConformancePlain(t *testing.T) { conformance(t, etcdstore.WithFair(false)) }
