package redisstore_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
)

// TestClusterFailoverPrimaryGone: the primary of a lock's slot is killed
// and stays down (its machine is gone), and the cluster promotes its
// replica. The same Store acquires through the new primary within seconds
// of the promotion, not once go-redis reloads its slot map on its own
// (ClusterStateReloadInterval, a minute by default), which no request to
// the dead address ever triggers.
func TestClusterFailoverPrimaryGone(t *testing.T) {
	topo := testenv.StartRedisClusterWithReplicas(t, 3)
	s := openURL(t, topo.URL(), uniquePrefix())
	ctx := t.Context()
	g, err := s.TryAcquire(ctx, "job", request("a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	i := topo.SlotOwner(t, "baton:{job}:lock")
	topo.Nodes[i].Kill()
	topo.AwaitPromotion(t, i, 60*time.Second)
	promoted := time.Now()
	var g2 backend.Grant
	for {
		g2, err = s.TryAcquire(ctx, "job", request("b", 2*time.Second))
		if err == nil || time.Since(promoted) > 20*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryAcquire %v after the promotion: %v", time.Since(promoted).Round(time.Millisecond), err)
	}
	t.Logf("acquired %v after the promotion; token %d before the failover, %d after", time.Since(promoted).Round(time.Millisecond), g.Token, g2.Token)
	if err := s.Release(ctx, g2); err != nil {
		t.Errorf("Release after the failover: %v", err)
	}
}
