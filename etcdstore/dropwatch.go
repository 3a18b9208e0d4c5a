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
