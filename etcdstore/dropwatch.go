package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// unconfirmedWatchWait bounds how long dropWatch waits for etcd to confirm
// a watch before cancelling it all the same.
const unconfirmedWatchWait = 10 * time.Second

// dropWatch ends the watch wch (started with WithCreatedNotify, under a
// context that cancel alone ends), whose creation etcd has confirmed or
// not. The etcd client forgets a watch cancelled before etcd confirmed it
// without telling etcd, which keeps its watcher until an event reaches
// the watched key or the client's watch stream closes: for a key that
// never changes again (a queue place gone, a lock name used once) that is
// for as long as the Store lives (its anchor keeps the stream open). So
// an unconfirmed watch is cancelled only once its confirmation arrives
// (the client then sends etcd a cancel), or after unconfirmedWatchWait,
// or at Close, in a goroutine that Close waits for. wch may be nil.
func (s *Store) dropWatch(wch clientv3.WatchChan, cancel context.CancelFunc, confirmed bool) {
	if wch == nil || confirmed {
		cancel()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		t := time.NewTimer(unconfirmedWatchWait)
		defer t.Stop()
		for {
			select {
			case wr, ok := <-wch:
				if !ok || wr.Created || wr.Canceled || wr.Err() != nil {
					return
				}
			case <-t.C:
				return
			case <-s.ctx.Done():
				return
			}
		}
	}()
}

// startWatch starts a watch of key under wctx, a context that only cancel
// ends (see dropWatch), and cancels it if the Store is closed before the
// etcd client returns the watch's channel. The client's Watch returns only
// once etcd confirms the watch or the watch's own context ends: with etcd
// down or stopped, for as long as that lasts, and Close must not wait with
// it. (Only Close: a watch cancelled before etcd confirmed it can stay on
// the server, see dropWatch, and the client's stream closes with the
// Store's own client, not with a client the caller gave.)
func (s *Store) startWatch(wctx context.Context, cancel context.CancelFunc, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	defer context.AfterFunc(s.ctx, cancel)()
	return s.client.Watch(wctx, key, opts...)
}
