package etcdstore

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// unreadyWake is how long the client's connection to etcd may stay not
// ready before watchConnection wakes the Store's waiters: long enough
// for a reconnection after a reset, short against a lease's TTL.
const unreadyWake = time.Second

// watchConnection wakes the waiters of every lock watched in this Store
// once the client's connection to etcd has not been ready for
// unreadyWake, once per such episode, and returns when the Store is
// closed. The etcd client resumes a watch silently when its connection
// comes back, and meanwhile a watched waiter is woken only by its
// engine's safety-net retry (a TTL later): woken now, its attempt asks
// etcd, since without a connection no attempt answers from the watch,
// and ends with why no answer came (see Store.wrap).
func (s *Store) watchConnection(conn *grpc.ClientConn) {
	defer s.wg.Done()
	ready := func(st connectivity.State) bool { return st == connectivity.Ready }
	for {
		if !awaitState(s.ctx, conn, func(st connectivity.State) bool { return !ready(st) }) {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, unreadyWake)
		back := awaitState(ctx, conn, ready)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		if !back {
			s.hub.wakeAll()
			if !awaitState(s.ctx, conn, ready) {
				return
			}
		}
	}
}

// awaitState waits until conn's state satisfies want, and reports
// whether it did before ctx ended.
func awaitState(ctx context.Context, conn *grpc.ClientConn, want func(connectivity.State) bool) bool {
	for {
		st := conn.GetState()
		if want(st) {
			return true
		}
		if !conn.WaitForStateChange(ctx, st) {
			return false
		}
	}
}
