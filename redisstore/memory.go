package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
)

// MemoryPolicy is a primary's memory limit and eviction policy, as INFO
// memory reports them.
//
// At its limit Redis evicts keys by the policy, whatever they hold. Under
// a volatile-* policy only keys that expire are evicted: a lock's key (a
// claim expires) and its queue, never its fence, which keeps the last
// claim's expiry; so a holder whose key is evicted loses its lock early,
// and nobody else acquires it before the claim could have expired (as
// after a DEL by hand). Under an allkeys-* policy the fence can go with
// the key, and another process can then take a lock that is still held
// (fencing tokens still increase: they follow the server's clock). Under
// noeviction, or without a limit, nothing is evicted; at the limit an
// acquisition fails with OOM, which the Store reports as
// backend.ErrUnavailable, and renewals go on (see the package
// documentation, "Memory limit and eviction").
type MemoryPolicy struct {
	Addr      string // the primary's address, as the client dials it
	MaxMemory int64  // bytes; 0: no limit
	Policy    string // maxmemory-policy: "noeviction", "volatile-lru", "allkeys-lru", ...
}

// Evicts returns what the policy lets Redis evict of a lock: "" (nothing:
// no limit, or noeviction), "claims" (volatile-*: lock keys, not fences)
// or "fences" (allkeys-*, or a policy this package does not know: lock
// keys and fences).
func (p MemoryPolicy) Evicts() string {
	switch {
	case p.MaxMemory == 0 || p.Policy == "noeviction":
		return ""
	case strings.HasPrefix(p.Policy, "volatile-"):
		return "claims"
	}
	return "fences"
}

// MemoryPolicies asks each primary the Store writes to for its memory
// limit and eviction policy (INFO memory): the server of a client of one
// server, the current primary behind Sentinel, every primary of a Cluster
// (a replica does not evict on its own: it applies its primary's
// evictions). The answer holds when the servers answered; CONFIG SET can
// change it at any time. A server whose INFO is disabled (rename-command)
// gives an error matching errors.ErrUnsupported; a user the ACL refuses
// INFO, one matching backend.ErrForbidden.
func (s *Store) MemoryPolicies(ctx context.Context) ([]MemoryPolicy, error) {
	if err := s.open("read the memory policy for", ""); err != nil {
		return nil, err
	}
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		p, err := memoryPolicy(ctx, s.client, serverAddr(s.client))
		if err != nil {
			return nil, wrapInfo(err)
		}
		return []MemoryPolicy{p}, nil
	}
	var (
		mu       sync.Mutex
		policies []MemoryPolicy
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		p, err := memoryPolicy(ctx, c, c.Options().Addr)
		mu.Lock()
		defer mu.Unlock()
		policies = append(policies, p)
		return err
	})
	if err != nil {
		return nil, wrapInfo(err)
	}
	return policies, nil
}

// memoryPolicy reads one server's INFO memory.
func memoryPolicy(ctx context.Context, c redis.Cmdable, addr string) (MemoryPolicy, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return MemoryPolicy{}, err
	}
	p := MemoryPolicy{Addr: addr}
	limit, okLimit := infoField(info, "maxmemory")
	p.Policy, _ = infoField(info, "maxmemory_policy")
	if p.MaxMemory, err = strconv.ParseInt(limit, 10, 64); !okLimit || err != nil || p.Policy == "" {
		return MemoryPolicy{}, fmt.Errorf("INFO memory from %s has no maxmemory and maxmemory_policy fields", addr)
	}
	return p, nil
}

// wrapInfo names what an INFO memory that failed says of the store.
func wrapInfo(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("redisstore: INFO memory: %w: %w (baton's locks do not need INFO; only this check does)", backend.ErrForbidden, err)
	case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("redisstore: INFO memory: %w: %w", backend.ErrForbidden, err)
	case strings.HasPrefix(msg, "ERR unknown command"):
		return fmt.Errorf("redisstore: INFO memory: %w: the server has no INFO command (disabled or renamed with rename-command): %w (baton's locks do not need INFO; only this check does)", errors.ErrUnsupported, err)
	}
	if why, ok := busyServer(msg); ok {
		return fmt.Errorf("redisstore: INFO memory: %w: %w (%s)", backend.ErrUnavailable, err, why)
	}
	return fmt.Errorf("redisstore: INFO memory: %w", storeerr.Classify(err))
}

// serverAddr is the address a client of one server dials; a Sentinel
// client dials the primary the sentinels name, which it does not tell.
func serverAddr(c redis.UniversalClient) string {
	if sc, ok := oneServer(c); ok {
		return sc.Options().Addr
	}
	return "the primary"
}

// oneServer returns c as a client of one fixed server: not a Cluster's,
// and not a Sentinel client (a *redis.Client too, whose address go-redis
// names "FailoverClient").
func oneServer(c redis.UniversalClient) (*redis.Client, bool) {
	sc, ok := c.(*redis.Client)
	return sc, ok && sc.Options().Addr != "FailoverClient"
}

// infoField returns the value of a field of an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
