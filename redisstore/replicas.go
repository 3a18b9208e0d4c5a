package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// WithReplicaAcks makes every acquisition and renewal wait until n
// replicas of the server that took it have acknowledged the write (Redis
// WAIT), for at most timeout. Redis replicates asynchronously, so without
// it a failover (Sentinel, Cluster) can promote a replica that never saw a
// claim or its last renewal, and let a second holder in while the first
// still works; with it, a failover loses a claim only if the n replicas
// that acknowledged it are lost too. The cost is a replication round trip
// on every acquisition and renewal, and a lock that cannot be taken or kept
// while fewer than n replicas are in sync.
//
// An acquisition that fewer than n replicas acknowledge in time is undone
// (the claim is released) and returns an error matching
// backend.ErrUnavailable that says how many did; a renewal in that case
// fails the same way (the engine retries it until the renew deadline).
// WAIT needs the write and the wait on one connection: it works with a
// client of one server, a Sentinel-managed primary and a Cluster; New
// refuses it for other clients (a Ring). n 0 (the default) sends no WAIT.
// Redlock's servers have no replicas of their own to wait for.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(o *options) { o.acks, o.ackTimeout = n, timeout }
}

// waiter is a connection that WAIT can follow.
type waiter interface {
	Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
}

// conn returns where to run a script on key and a function that returns
// it: the client itself, or, with WithReplicaAcks, one connection to the
// server that serves key, so that WAIT follows the script's write there.
func (s *Store) conn(ctx context.Context, key string) (redis.Scripter, func(), error) {
	if s.acks == 0 {
		return s.client, func() {}, nil
	}
	c, err := s.primary(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	conn := c.Conn()
	return conn, func() { _ = conn.Close() }, nil
}

// primary returns the client of the server that serves key, for
// WithReplicaAcks (New allows it only with a *redis.Client or a
// *redis.ClusterClient).
func (s *Store) primary(ctx context.Context, key string) (*redis.Client, error) {
	switch cl := s.client.(type) {
	case *redis.Client:
		return cl, nil
	case *redis.ClusterClient:
		return cl.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("%w: WithReplicaAcks needs a client of one server, a Sentinel primary or a Cluster, not %T",
		backend.ErrInvalidOptions, s.client)
}

// awaitAcks waits for WithReplicaAcks's replicas to acknowledge the last
// write on sc; nil if they did (or none are asked for).
func (s *Store) awaitAcks(ctx context.Context, sc redis.Scripter) error {
	w, ok := sc.(waiter)
	if s.acks == 0 || !ok {
		return nil // conn gives a waiter whenever acks are asked for
	}
	n, err := w.Wait(ctx, s.acks, s.ackTimeout).Result()
	if err != nil {
		// The server's answer first, as classify reads it.
		return fmt.Errorf("%w (WAIT %d %d)", err, s.acks, s.ackTimeout.Milliseconds())
	}
	if int(n) < s.acks {
		return fmt.Errorf("%w: %d of %d replicas acknowledged the write within %v (WithReplicaAcks)",
			backend.ErrUnavailable, n, s.acks, s.ackTimeout)
	}
	return nil
}
