package etcdbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// meter counts a client's requests (a stream message counts as one) by
// method, and the bytes of the answers.
type meter struct {
	mu    sync.Mutex
	n     map[string]int
	bytes int
}

func (m *meter) add(method string, reply any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if method != "" {
		m.n[method[strings.LastIndex(method, "/")+1:]]++
	}
	if msg, ok := reply.(proto.Message); ok {
		m.bytes += proto.Size(msg)
	}
}

func (m *meter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n, m.bytes = map[string]int{}, 0
}

func (m *meter) read() (map[string]int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n, m.bytes
}

type meteredStream struct {
	grpc.ClientStream
	m      *meter
	method string
}

func (s meteredStream) SendMsg(msg any) error {
	s.m.add(s.method, nil)
	return s.ClientStream.SendMsg(msg)
}

func (s meteredStream) RecvMsg(msg any) error {
	err := s.ClientStream.RecvMsg(msg)
	if err == nil {
		s.m.add("", msg)
	}
	return err
}

func openMetered(t testing.TB, endpoints []string) (*clientv3.Client, *meter) {
	m := &meter{n: map[string]int{}}
	cc, err := etcdstore.Config{Endpoints: endpoints}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cc.DialOptions = append(cc.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, conn, opts...)
			m.add(method, reply)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, conn, method, opts...)
			if err != nil {
				return nil, err
			}
			return meteredStream{s, m, method}, nil
		}))
	c, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

type holdRow struct {
	name           string
	renewals       string
	perSecond      float64
	detail         string
	bytesPerSecond float64
	cpu            string // etcd CPU time per second of holding
}

func summarize(name, renewals string, n map[string]int, bytes int, window time.Duration, cpu0, cpu1 time.Duration) holdRow {
	total := 0
	var parts []string
	for k, v := range n {
		total += v
		parts = append(parts, fmt.Sprintf("%s %.1f/s", k, float64(v)/window.Seconds()))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	c := "?"
	if cpu0 >= 0 && cpu1 >= 0 {
		c = fmt.Sprintf("%.1fms", float64(cpu1-cpu0)/float64(time.Millisecond)/window.Seconds())
	}
	return holdRow{name, renewals, float64(total) / window.Seconds(), strings.Join(parts, ", "), float64(bytes) / window.Seconds(), c}
}

// parallel runs f(i) for i in [0, n) on acquireConns goroutines.
func parallel(t *testing.T, n int, f func(i int) error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range acquireConns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || t.Failed() {
					return
				}
				if err := f(i); err != nil {
					t.Errorf("%d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// holdMany holds heldLocks locks in one process with each library and
// counts what keeping them costs.
func holdMany(t *testing.T, eps []string, cpu func() time.Duration) []holdRow {
	var rows []holdRow
	ctx := t.Context()

	// baton: one Store, heldLocks Mutexes, each a Lease renewed by the engine.
	{
		c, m := openMetered(t, eps)
		s, err := etcdstore.New(c, etcdstore.WithPrefix("/bench/hold/"+uniqueKey("b")+"/"), etcdstore.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		var renewed atomic.Int64
		obs := baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
			if e.Kind == baton.EventRenewed {
				renewed.Add(1)
			}
		}))
		leases := make([]*baton.Lease, heldLocks)
		parallel(t, heldLocks, func(i int) error {
			mu, err := baton.NewMutex(s, fmt.Sprintf("lock-%05d", i), baton.WithIdentity("holder"), baton.WithTTL(renewTTL), baton.WithLogger(quiet), obs)
			if err != nil {
				return err
			}
			leases[i], err = mu.Lock(ctx)
			return err
		})
		m.reset()
		renewed.Store(0)
		c0 := cpu()
		time.Sleep(renewWindow) // the subject is what holding costs over time
		n, bytes := m.read()
		c1 := cpu()
		for i, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("baton: lease %d ended: %v", i, err)
			}
		}
		rows = append(rows, summarize("baton etcdstore (one Store)",
			fmt.Sprintf("%.0f (answered locally)", float64(renewed.Load())/renewWindow.Seconds()), n, bytes, renewWindow, c0, c1))
		parallel(t, heldLocks, func(i int) error { return leases[i].Unlock(ctx) })
		_ = s.Close()
		_ = c.Close()
	}

	// etcd concurrency: one Session, heldLocks Mutexes on it.
	{
		c, m := openMetered(t, eps)
		sess, err := concurrency.NewSession(c, concurrency.WithTTL(int(renewTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		pfx := "/bench/hold/" + uniqueKey("m") + "/"
		mus := make([]*concurrency.Mutex, heldLocks)
		parallel(t, heldLocks, func(i int) error {
			mus[i] = concurrency.NewMutex(sess, fmt.Sprintf("%slock-%05d", pfx, i))
			return mus[i].Lock(ctx)
		})
		m.reset()
		c0 := cpu()
		time.Sleep(renewWindow)
		n, bytes := m.read()
		rows = append(rows, summarize("etcd concurrency.Mutex (one Session)", "none (the session's lease only)", n, bytes, renewWindow, c0, cpu()))
		parallel(t, heldLocks, func(i int) error { return mus[i].Unlock(ctx) })
		_ = sess.Close()
		_ = c.Close()
	}

	// A lease per lock, kept alive by the etcd client (what a backend
	// without a shared lease costs).
	{
		c, m := openMetered(t, eps)
		ids := make([]clientv3.LeaseID, heldLocks)
		kctx, cancel := context.WithCancel(ctx)
		parallel(t, heldLocks, func(i int) error {
			r, err := c.Grant(ctx, int64(renewTTL/time.Second))
			if err != nil {
				return err
			}
			ids[i] = r.ID
			ch, err := c.KeepAlive(kctx, r.ID)
			if err != nil {
				return err
			}
			go func() {
				for range ch {
				}
			}()
			return nil
		})
		m.reset()
		c0 := cpu()
		time.Sleep(renewWindow)
		n, bytes := m.read()
		row := summarize("a lease per lock (clientv3 KeepAlive)", "-", n, bytes, renewWindow, c0, cpu())
		cancel()
		// A lease whose keepalives fell behind on a busy machine has
		// expired by now: the row says how many, and the clean-up skips it.
		var expired atomic.Int64
		parallel(t, heldLocks, func(i int) error {
			_, err := c.Revoke(ctx, ids[i])
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				expired.Add(1)
				return nil
			}
			return err
		})
		if k := expired.Load(); k > 0 {
			row.detail += fmt.Sprintf("; %d of %d leases expired during the run (their keepalives fell behind)", k, heldLocks)
		}
		rows = append(rows, row)
		_ = c.Close()
	}
	return rows
}
