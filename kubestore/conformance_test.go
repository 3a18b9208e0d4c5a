package kubestore_test

import (
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/kubestore"
)

// TestLeaseConformance runs baton's backend conformance suite against a
// real kube-apiserver. Every subtest gets a fresh namespace, and every
// client a new LeaseStore with its own client and rate limiter, as
// separate processes would have. The harness TTL is one second, the
// shortest leaseDurationSeconds.
func TestLeaseConformance(t *testing.T) {
	cfg := controlPlane(t)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			ns := newNamespace(t)
			return func(t *testing.T) backend.Backend {
				s, err := kubestore.NewLeaseForConfig(cfg, ns, kubestore.WithRateLimit(500, 1000))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
	})
}

// TestConfigMapConformance runs the conformance suite against the
// ConfigMap backend on the same API server.
func TestConfigMapConformance(t *testing.T) {
	cfg := controlPlane(t)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			ns := newNamespace(t)
			return func(t *testing.T) backend.Backend {
				s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(500, 1000))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
	})
}
