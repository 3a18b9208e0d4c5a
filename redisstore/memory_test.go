package redisstore_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// MemoryPolicies reports each primary's limit and policy as the server
// has them, and Evicts says what of a lock the policy lets Redis evict.
func TestMemoryPolicies(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	srv := testenv.StartRedis(t)
	admin := newClient(t, srv.Addr())
	s := openURL(t, srv.URL(), uniquePrefix())
	for _, tc := range []struct {
		maxmemory, policy string
		want              redisstore.MemoryPolicy
		evicts            string
	}{
		{"0", "allkeys-lru", redisstore.MemoryPolicy{MaxMemory: 0, Policy: "allkeys-lru"}, ""},
		{"100mb", "noeviction", redisstore.MemoryPolicy{MaxMemory: 100 << 20, Policy: "noeviction"}, ""},
		{"100mb", "volatile-ttl", redisstore.MemoryPolicy{MaxMemory: 100 << 20, Policy: "volatile-ttl"}, "claims"},
		{"100mb", "allkeys-random", redisstore.MemoryPolicy{MaxMemory: 100 << 20, Policy: "allkeys-random"}, "fences"},
	} {
		if err := admin.ConfigSet(ctx, "maxmemory", tc.maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.MemoryPolicies(ctx)
		tc.want.Addr = srv.Addr()
		if err != nil || len(got) != 1 || got[0] != tc.want {
			t.Errorf("maxmemory %s, %s: MemoryPolicies = %+v, %v; want [%+v]", tc.maxmemory, tc.policy, got, err, tc.want)
			continue
		}
		if e := got[0].Evicts(); e != tc.evicts {
			t.Errorf("maxmemory %s, %s: Evicts() = %q, want %q", tc.maxmemory, tc.policy, e, tc.evicts)
		}
	}

	// A user without +info: ErrForbidden, saying the locks do not need it.
	if err := admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "allcommands", "-info", "allkeys").Err(); err != nil {
		t.Fatal(err)
	}
	limited := openURL(t, "redis://noinfo:pw@"+srv.Addr(), uniquePrefix())
	if _, err := limited.MemoryPolicies(ctx); !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("MemoryPolicies as a user without +info: %v; want ErrForbidden", err)
	}

	// A Cluster: every primary, by its address.
	c := testenv.StartRedisCluster(t, 3)
	got, err := openURL(t, c.URL(), uniquePrefix()).MemoryPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, p := range got {
		addrs = append(addrs, p.Addr)
	}
	slices.Sort(addrs)
	want := slices.Sorted(slices.Values(c.Addrs()))
	if !slices.Equal(addrs, want) {
		t.Errorf("MemoryPolicies on a cluster of 3 primaries: %+v; want one per primary %v", got, want)
	}
}
