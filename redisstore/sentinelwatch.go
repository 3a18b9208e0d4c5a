package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A sentinelWatch makes a Store opened on a redis+sentinel:// URL follow a
// failover that the sentinel its client listens to cannot announce.
//
// go-redis's FailoverClient asks one sentinel for the primary when it
// dials a connection, and subscribes to that sentinel's +switch-master;
// its pooled connections to the old primary are dropped only when it
// hears the switch or dials again. If that sentinel dies, the
// subscription redials it for ever, and the others' failover goes
// unheard: the client writes to the old primary, which stays writable
// until the sentinels demote it (about 10 s after the promotion), while
// clients that heard the switch write to the new one: two holders.
//
// The watch listens to +switch-master on every sentinel of the URL and,
// on a switch of the Store's primary, makes the client dial through its
// dialer, which asks its sentinel for the primary (another sentinel, and
// a new subscription, if that one is dead) and drops the connections to
// any other address. It sends nothing on the happy path. Then it calls
// onSwitch, which moves the Store's subscriptions to the new primary.
type sentinelWatch struct {
	client   *redis.Client
	master   string
	addrs    []string // the sentinels'
	onSwitch atomic.Pointer[func(context.Context)]
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	clients  []*redis.SentinelClient
	subs     []*redis.PubSub
}

// followFor bounds how long the watch makes the client re-resolve after
// a switch until it dials the announced address (a sentinel that has
// not yet learnt of the failover still names the old primary); followEvery
// is the pause between tries.
const (
	followFor   = 30 * time.Second
	followEvery = 200 * time.Millisecond
)

// startSentinelWatch subscribes, in the background, to every sentinel of
// opt, for client (a FailoverClient built on opt). Close stops it.
func startSentinelWatch(client *redis.Client, opt *redis.FailoverOptions) *sentinelWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &sentinelWatch{client: client, master: opt.MasterName, addrs: opt.SentinelAddrs, cancel: cancel}
	for _, addr := range opt.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: opt.SentinelUsername, Password: opt.SentinelPassword,
			TLSConfig: opt.TLSConfig, Dialer: opt.Dialer, ContextTimeoutEnabled: true, DialerRetries: 1,
		})
		ps := sc.Subscribe(ctx) // no channel yet: does not dial
		w.clients, w.subs = append(w.clients, sc), append(w.subs, ps)
		w.wg.Add(1)
		go w.listen(ctx, ps)
	}
	return w
}

// listen follows ps's +switch-master until ps is closed.
func (w *sentinelWatch) listen(ctx context.Context, ps *redis.PubSub) {
	defer w.wg.Done()
	_ = ps.Subscribe(ctx, "+switch-master") // a failure is retried by the channel
	for msg := range ps.Channel() {
		// "NAME OLD-IP OLD-PORT NEW-IP NEW-PORT"
		f := strings.Fields(msg.Payload)
		if len(f) == 5 && f[0] == w.master {
			w.follow(ctx, net.JoinHostPort(f[3], f[4]))
			if fn := w.onSwitch.Load(); fn != nil {
				(*fn)(ctx)
			}
		}
	}
}

// follow makes the client re-resolve the primary until it dials addr,
// for at most followFor.
func (w *sentinelWatch) follow(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(ctx, followFor)
	defer cancel()
	for {
		if w.dialed(ctx) == addr {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(followEvery):
		}
	}
}

// dialed dials through the client's dialer (which resolves the primary
// through the sentinels and drops the pool's connections to any other
// address), closes the connection and returns its remote address; "" if
// the dial failed.
func (w *sentinelWatch) dialed(ctx context.Context) string {
	conn, err := w.client.Options().Dialer(ctx, "tcp", "")
	if err != nil {
		return ""
	}
	defer func() { _ = conn.Close() }()
	return conn.RemoteAddr().String()
}

// Close stops the watch and waits for its goroutines.
func (w *sentinelWatch) Close() error {
	w.cancel()
	var errs []error
	for i := range w.subs {
		errs = append(errs, w.subs[i].Close(), w.clients[i].Close())
	}
	w.wg.Wait()
	return errors.Join(errs...)
}
