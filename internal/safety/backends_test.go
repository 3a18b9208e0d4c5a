//go:build linux

package safety

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// ttl is the contenders' lease duration: short, so that the short mode is
// quick, long enough for -race on two shared cores.
const ttl = 2 * time.Second

// proxied returns a link to target through a fresh faultproxy, closed with
// the test.
func proxied(t *testing.T, targets []string, scheme string) link {
	t.Helper()
	var ps []*faultproxy.Proxy
	var addrs []string
	for _, tg := range targets {
		p, err := faultproxy.New(tg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		ps = append(ps, p)
		addrs = append(addrs, scheme+p.Addr())
	}
	return link{
		target: strings.Join(addrs, ","),
		cut: func() {
			for _, p := range ps {
				p.Cut()
			}
		},
		restore: func() {
			for _, p := range ps {
				p.Restore()
				p.SetLatency(0)
			}
		},
		cutOne: func() { ps[0].Cut() },
		delay: func(d time.Duration) {
			for _, p := range ps {
				p.SetLatency(d)
			}
		},
		retarget: func(addr string) {
			for _, p := range ps {
				p.Retarget(addr)
			}
		},
		loseReplies: func(n int) {
			for _, p := range ps {
				p.LoseReplies(n)
			}
		},
		drop: func() {
			for _, p := range ps {
				p.Drop()
			}
		},
		forbid: noForbid,
	}
}

// noForbid is the forbid of a link whose contenders share one store user.
func noForbid(context.Context, bool) (string, error) {
	return "", errors.New("the contenders share one store user: no permission of one can be revoked")
}

// local is the link of a store on this machine's file system: nothing to
// cut.
func local(target string) link {
	return link{target: target, cut: func() {}, restore: func() {}, cutOne: func() {}, delay: func(time.Duration) {}, retarget: func(string) {},
		loseReplies: func(int) {}, drop: func() {}, forbid: noForbid}
}

func fileEnv(t *testing.T) *backendEnv {
	dir := t.TempDir()
	return &backendEnv{name: "file", ttl: ttl, claimLife: ttl,
		newLink: func(*testing.T) link { return local(dir) },
		// The record file (file/paths.go: the name, for short names,
		// plus ".json"); its OS lock file stays.
		deleteLock: func(_ context.Context, lock string) error {
			return os.Remove(filepath.Join(dir, lock+".json"))
		}}
}

// redisEnv runs one redis-server with appendonly yes and appendfsync
// always, so that a restart keeps every acknowledged write (tokens with
// them).
func redisEnv(t *testing.T) *backendEnv {
	srv := testenv.StartRedis(t, testenv.AppendOnly())
	return &backendEnv{name: "redis", ttl: ttl, claimLife: ttl, keepsThroughDrop: true,
		newLink:      func(t *testing.T) link { return proxied(t, []string{srv.Addr()}, "") },
		deleteLock:   redisDel(srv.Addr()),
		deleteAll:    redisDelAll(srv.Addr()),
		evictLock:    redisEvict(srv.Addr()),
		pauseClients: redisPause(srv.Addr()),
		restart: func(t *testing.T, down time.Duration) {
			srv.Kill()
			time.Sleep(down)
			srv.Start()
		}}
}

// redlockEnv runs three independent redis-servers.
func redlockEnv(t *testing.T) *backendEnv {
	var addrs []string
	var srvs []*testenv.RedisServer
	for range 3 {
		s := testenv.StartRedis(t, testenv.AppendOnly())
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr())
	}
	return &backendEnv{name: "redlock", ttl: ttl, claimLife: ttl, keepsThroughDrop: true,
		newLink:    func(t *testing.T) link { return proxied(t, addrs, "") },
		deleteLock: redisDel(addrs...),
		deleteAll:  redisDelAll(addrs...),
		// redisDelAll deletes on one server after another.
		deleteAllByServer: true,
		pauseClients:      redisPause(addrs...),
		pauseOne: func() func() {
			srvs[0].Pause()
			return srvs[0].Resume
		},
		restart: func(t *testing.T, down time.Duration) {
			// All three: the lock is lost with them, not a quorum of them.
			for _, s := range srvs {
				s.Kill()
			}
			time.Sleep(down)
			for _, s := range srvs {
				s.Start()
			}
		}}
}

// etcdEnv runs one etcd member. etcd keeps a claim for its lease
// (etcdClaimLife).
func etcdEnv(t *testing.T) *backendEnv {
	srv := testenv.StartEtcd(t, testenv.EtcdNoFsync())
	admin := etcdAdmin{endpoint: "http://" + srv.Addr()}
	be := &backendEnv{name: "etcd", ttl: ttl, claimLife: etcdClaimLife(ttl),
		newLink:     func(t *testing.T) link { return proxied(t, []string{srv.Addr()}, "http://") },
		deleteLock:  admin.deleteClaim,
		deleteAll:   admin.deletePrefix,
		revokeLease: admin.revokeClaimLease,
		restart: func(t *testing.T, down time.Duration) {
			srv.Kill()
			time.Sleep(down)
			srv.Start()
		}}
	etcdSnapshots(t, be, srv, admin)
	return be
}

// etcdClaimLife is how long etcd keeps a claim of TTL ttl: its lease's,
// the TTL plus a headroom of max(TTL/10, 500ms), rounded up to whole
// seconds.
func etcdClaimLife(ttl time.Duration) time.Duration {
	head := max(ttl/10, 500*time.Millisecond)
	return (ttl + head + time.Second - 1).Truncate(time.Second)
}

// etcdAdmin acts on an etcd member as an operator with etcdctl would,
// each call on a client of its own.
type etcdAdmin struct{ endpoint string }

// claimKey is a lock's claim key (etcdstore/doc.go: prefix + name).
func claimKey(lock string) string { return "/baton/locks/" + lock }

// guardKey is a lock's guard key (etcdstore/doc.go: prefix + ".guard/" +
// name).
func guardKey(lock string) string { return "/baton/locks/.guard/" + lock }

func (a etcdAdmin) do(f func(cli *clientv3.Client) error) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{a.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(cli)
}

// deleteClaim deletes the lock's claim key (etcdctl del); "/last", with
// the last token, stays.
func (a etcdAdmin) deleteClaim(ctx context.Context, lock string) error {
	return a.do(func(cli *clientv3.Client) error {
		resp, err := cli.Delete(ctx, claimKey(lock))
		if err == nil && resp.Deleted != 1 {
			err = fmt.Errorf("deleted %d keys named %s, want 1", resp.Deleted, claimKey(lock))
		}
		return err
	})
}

// deletePrefix deletes every key under the Stores' prefix (`etcdctl del
// --prefix /baton/locks/`), over every lock on the member: the claim,
// /last, /released, the claim's guard and, in fair mode, the queue. The
// claim key and its guard must be among them. It returns the keys of the
// lock it deleted.
func (a etcdAdmin) deletePrefix(ctx context.Context, lock string) (string, error) {
	var keys []string
	err := a.do(func(cli *clientv3.Client) error {
		resp, err := cli.Delete(ctx, "/baton/locks/", clientv3.WithPrefix(), clientv3.WithPrevKV())
		if err != nil {
			return err
		}
		for _, kv := range resp.PrevKvs {
			if k := string(kv.Key); k == claimKey(lock) || strings.HasPrefix(k, claimKey(lock)+"/") || k == guardKey(lock) {
				keys = append(keys, k)
			}
		}
		if !slices.Contains(keys, claimKey(lock)) || !slices.Contains(keys, guardKey(lock)) {
			return fmt.Errorf("deleted %d keys under /baton/locks/, of lock %s %q: want its claim and guard", resp.Deleted, lock, keys)
		}
		return nil
	})
	return strings.Join(keys, " "), err
}

// revokeClaimLease finds the lease that the lock's claim key is attached
// to (etcdctl get -w json: the key's lease) and revokes it (etcdctl lease
// revoke), with every key on it. The claim must be the one of token tok
// (its mod revision), so that the holder the fault was meant for is the
// one whose lease goes. It returns the lease's ID.
func (a etcdAdmin) revokeClaimLease(ctx context.Context, lock string, tok uint64) (int64, error) {
	var id int64
	err := a.do(func(cli *clientv3.Client) error {
		resp, err := cli.Get(ctx, claimKey(lock))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return fmt.Errorf("no claim key %s", claimKey(lock))
		}
		kv := resp.Kvs[0]
		if uint64(kv.ModRevision) != tok || kv.Lease == 0 {
			return fmt.Errorf("claim key %s has mod revision %d and lease %x, want token %d on a lease", claimKey(lock), kv.ModRevision, kv.Lease, tok)
		}
		id = kv.Lease
		_, err = cli.Revoke(ctx, clientv3.LeaseID(id))
		return err
	})
	return id, err
}

// The Kubernetes control plane (kube-apiserver + etcd from envtest) is
// shared by every Kubernetes scenario and stopped by TestMain.
var (
	crdOnce   sync.Once
	crdErr    error
	planeOnce sync.Once
	plane     *envtest.Environment
	planeCfg  *rest.Config
	planeErr  error
	apiProxy  *throttler
	certDir   string // the API server's certificates, kept across its restarts
)

func stopShared() error {
	var err error
	if apiProxy != nil {
		apiProxy.close()
	}
	if plane != nil {
		err = plane.Stop()
	}
	if certDir != "" {
		err = errors.Join(err, os.RemoveAll(certDir))
	}
	return err
}

// throttler is a plain-HTTP reverse proxy in front of the API server that
// authenticates as the admin and answers 429 Too Many Requests (with
// Retry-After: 1, as API Priority and Fairness does) to a fraction of the
// requests. Contenders reach it through their own faultproxy.
type throttler struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	rt   http.RoundTripper
	frac atomic.Uint64 // math.Float64bits is overkill: parts per million
	rng  *rand.Rand
	mu   sync.Mutex
}

func newThrottler(cfg *rest.Config) (*throttler, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	th := &throttler{ln: ln, done: make(chan struct{}), rt: rt, rng: rand.New(rand.NewPCG(uint64(seed), 429))}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport:     rt,
		FlushInterval: -1,
		// A contender's watch ends when its context does; that is not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	th.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if th.throttled() {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too many requests (injected)","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}`)
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(th.done)
		_ = th.srv.Serve(ln)
	}()
	return th, nil
}

func (th *throttler) url() string { return "http://" + th.ln.Addr().String() }

func (th *throttler) set(frac float64) { th.frac.Store(uint64(frac * 1e6)) }

func (th *throttler) throttled() bool {
	f := th.frac.Load()
	if f == 0 {
		return false
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.rng.Uint64N(1e6) < f
}

func (th *throttler) close() {
	_ = th.srv.Close()
	<-th.done
	utilnet.CloseIdleConnectionsFor(th.rt)
}

// controlPlane starts the shared API server on first use.
func controlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := testenv.KubeAssets(t)
	planeOnce.Do(func() {
		ctrllog.SetLogger(logr.Discard())
		// A certificate directory of our own: envtest keeps it (and the
		// serving certificate in it) when the API server restarts, so
		// the throttler's client still trusts the server afterwards.
		if certDir, planeErr = os.MkdirTemp("", "baton-safety-apiserver-"); planeErr != nil {
			return
		}
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		env.ControlPlane.APIServer = &envtest.APIServer{CertDir: certDir}
		// Kept across the restarts of the rows that kill it, and copied by
		// a second API server (startAPIServerBeside).
		env.ControlPlane.APIServer.Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
		start := time.Now()
		planeCfg, planeErr = env.Start()
		if planeErr != nil {
			return
		}
		plane = env
		fmt.Fprintf(os.Stderr, "safety: control plane started in %v\n", time.Since(start).Round(time.Millisecond))
		apiProxy, planeErr = newThrottler(planeCfg)
	})
	if planeErr != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, planeErr)
	}
	return rest.CopyConfig(planeCfg)
}

// openKube opens the Kubernetes backend name (lease, configmap or crd) on
// namespace ns.
func openKube(cfg *rest.Config, name, ns string) (backend.Backend, error) {
	switch name {
	case "lease":
		return kubestore.NewLeaseForConfig(cfg, ns)
	case "configmap":
		return kubestore.NewConfigMapForConfig(cfg, ns)
	default:
		return kubestore.NewDistributedLockForConfig(cfg, ns)
	}
}

// renewTimeReader reads a lock's renew time, as written by its holder,
// through the store's own status view (backend.Lister), as the admin.
func renewTimeReader(t *testing.T, cfg *rest.Config, name, ns string) func(context.Context, string) (time.Time, error) {
	t.Helper()
	b, err := openKube(cfg, name, ns)
	if err != nil {
		t.Fatalf("opening the %s store as the admin: %v", name, err)
	}
	return func(ctx context.Context, lock string) (time.Time, error) {
		recs, err := b.(backend.Lister).List(ctx)
		if err != nil {
			return time.Time{}, err
		}
		for _, r := range recs {
			if r.Key == lock {
				return r.RenewTime, nil
			}
		}
		return time.Time{}, nil
	}
}

// restartAPIServer kills the shared kube-apiserver (SIGKILL: a crash, no
// graceful shutdown; a SIGTERM'd one keeps serving for about ten seconds),
// keeps it down for down and starts it again on the same port with the
// same certificates. etcd, and every object in it, stays up: this is the
// API server's restart, not its store's.
func restartAPIServer(t *testing.T, down time.Duration) {
	t.Helper()
	api := plane.ControlPlane.APIServer
	pid, err := apiServerPID()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kube-apiserver (pid %d): %v", pid, err)
	}
	// Stop reaps the process (and finds it gone); Start runs a new one.
	if err := api.Stop(); err != nil {
		t.Fatalf("reaping kube-apiserver: %v", err)
	}
	time.Sleep(down)
	begin := time.Now()
	if err := api.Start(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver killed, down %v, healthy again %v after its start", down, time.Since(begin).Round(time.Millisecond))
}

// apiServerPID finds the shared kube-apiserver: the process whose command
// line names certDir (envtest does not expose its process), other than the
// processes in not (a second API server started with the same flags).
func apiServerPID(not ...int) (int, error) {
	want := []byte("--cert-dir=" + certDir)
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || slices.Contains(not, pid) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(cmd, []byte{0}) {
			if bytes.Equal(arg, want) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process with %s", want)
}

// newNamespace creates a fresh namespace.
func newNamespace(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "safety-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// leaseEnv is a Kubernetes backend (name: lease, configmap or crd). A waiter judges a claim expired after
// seeing it unchanged for the TTL on its own clock, from the first time it
// saw that version: at most the TTL after the holder's last renew, plus
// the watch's delivery.
func leaseEnv(t *testing.T, name string) *backendEnv {
	cfg := controlPlane(t)
	ns := newNamespace(t, cfg)
	be := &backendEnv{name: name, ttl: ttl, claimLife: ttl, ns: ns,
		newLink: func(t *testing.T) link {
			host := strings.TrimPrefix(apiProxy.url(), "http://")
			return proxied(t, []string{host}, "http://")
		},
		restart:    restartAPIServer,
		throttle:   apiProxy.set,
		renewTime:  renewTimeReader(t, cfg, name, ns),
		deleteLock: kubeDeleter(t, cfg, name, ns),
		annotate:   kubeAnnotator(t, cfg, name, ns)}
	if name == "lease" {
		be.cutDuration = leaseCutter(t, cfg, ns)
	}
	return be
}

// leaseCutter patches a Lease's spec.leaseDurationSeconds to 1, as
// `kubectl patch lease NAME -p '{"spec":{"leaseDurationSeconds":1}}'`
// does (for the Lease backend; the others keep the duration elsewhere).
func leaseCutter(t *testing.T, cfg *rest.Config, ns string) func(context.Context, string) error {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, lock string) error {
		_, err := cs.CoordinationV1().Leases(ns).Patch(ctx, lock, types.MergePatchType, []byte(`{"spec":{"leaseDurationSeconds":1}}`), metav1.PatchOptions{})
		return err
	}
}

// redisDel deletes a lock's claim key on every server (redisstore/doc.go:
// "baton:{N}:lock"); the fence key, with the last token, stays.
func redisDel(addrs ...string) func(context.Context, string) error {
	return func(ctx context.Context, lock string) error {
		var errs []error
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			n, err := c.Del(ctx, "baton:{"+lock+"}:lock").Result()
			if err == nil && n != 1 && len(addrs) == 1 {
				err = fmt.Errorf("DEL baton:{%s}:lock on %s deleted %d keys, want 1", lock, a, n)
			}
			errs = append(errs, err, c.Close())
		}
		return errors.Join(errs...)
	}
}

// redisEvict has the server at addr evict a held lock's keys as a full
// memory does under maxmemory-policy volatile-ttl (the policy of the
// volatile-* family that picks keys by their expiry, so the claim, which
// expires within the TTL, goes first): it sets maxmemory a little above
// the memory in use and writes filler keys that expire in an hour until
// every key of the lock that expires is gone, the claim among them; then
// it lifts the limit and deletes the filler. The fence, which does not
// expire, stays; the waiters' queue goes too. While the limit holds, a
// script whose first write may need memory (an acquisition, a waiter
// joining the queue) fails with OOM.
func redisEvict(addr string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, lock string) (desc string, err error) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return "", err
		}
		used, err := strconv.ParseInt(infoValue(info, "used_memory"), 10, 64)
		if err != nil {
			return "", fmt.Errorf("INFO memory: used_memory: %w", err)
		}
		limit := used + 1<<20
		if err := configSet(ctx, c, "maxmemory-policy", "volatile-ttl", "maxmemory-samples", "10", "maxmemory", strconv.FormatInt(limit, 10)); err != nil {
			return "", err
		}
		defer func() {
			// The limit goes first, so that the contenders can write again.
			err = errors.Join(err, configSet(context.WithoutCancel(ctx), c, "maxmemory", "0", "maxmemory-policy", "noeviction", "maxmemory-samples", "5"),
				delFiller(context.WithoutCancel(ctx), c))
		}()
		filler := strings.Repeat("x", 1024)
		for batch := 0; ; batch++ {
			left, err := expiringKeys(ctx, c, "baton:{"+lock+"}:")
			if err != nil {
				return "", err
			}
			if len(left) == 0 {
				return fmt.Sprintf("every key of the lock that expires evicted (maxmemory %d bytes, volatile-ttl, %d KiB of filler)", limit, 256*batch), nil
			}
			if batch == 64 { // 16 MiB: far more than the 1 MiB of room
				return "", fmt.Errorf("%v still there after %d KiB of filler with maxmemory %d bytes", left, 256*batch, limit)
			}
			p := c.Pipeline()
			for i := range 256 {
				p.Set(ctx, fmt.Sprintf("safety:filler:%d:%d", batch, i), filler, time.Hour)
			}
			if _, err := p.Exec(ctx); err != nil {
				return "", err
			}
		}
	}
}

// expiringKeys returns the keys of a lock (prefix "baton:{N}:") that have
// an expiry, and its claim key if present whatever its expiry.
func expiringKeys(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	var left []string
	for _, k := range []string{"lock", "fence", "queue", "queued", "next"} {
		d, err := c.PTTL(ctx, prefix+k).Result()
		if err != nil {
			return nil, err
		}
		if d >= 0 || k == "lock" && d != -2 { // go-redis gives PTTL's -1 (no expiry) and -2 (no key) as they are
			left = append(left, prefix+k)
		}
	}
	return left, nil
}

// configSet runs CONFIG SET with the name-value pairs given.
func configSet(ctx context.Context, c *redis.Client, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := c.ConfigSet(ctx, pairs[i], pairs[i+1]).Err(); err != nil {
			return fmt.Errorf("CONFIG SET %s %s: %w", pairs[i], pairs[i+1], err)
		}
	}
	return nil
}

// delFiller deletes redisEvict's filler keys.
func delFiller(ctx context.Context, c *redis.Client) error {
	it := c.Scan(ctx, 0, "safety:filler:*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return c.Unlink(ctx, keys...).Err()
}

// infoValue returns a field of an INFO reply ("" if absent).
func infoValue(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// redisDelAll deletes every key of a lock on every server, as an operator
// would with `redis-cli --scan --pattern 'baton:{N}:*' | xargs redis-cli
// del`: the claim, the fence (the token counter and the claim's recorded
// expiry) and the queue of waiters. The claim and the fence must be among
// them on a majority of the servers (a Redlock holder may have won a bare
// quorum).
func redisDelAll(addrs ...string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, lock string) (string, error) {
		base := "baton:{" + lock + "}:"
		var done []string
		var errs []error
		both := 0
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			var keys []string
			it := c.Scan(ctx, 0, base+"*", 0).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			err := it.Err()
			if err == nil && len(keys) > 0 {
				err = c.Del(ctx, keys...).Err()
			}
			if err == nil && slices.Contains(keys, base+"lock") && slices.Contains(keys, base+"fence") {
				both++
			}
			slices.Sort(keys)
			done = append(done, fmt.Sprintf("%s on %s", strings.Join(keys, " "), a))
			errs = append(errs, err, c.Close())
		}
		if both <= len(addrs)/2 && errors.Join(errs...) == nil {
			errs = append(errs, fmt.Errorf("%slock and %sfence deleted on %d of %d servers, want a majority", base, base, both, len(addrs)))
		}
		return strings.Join(done, "; "), errors.Join(errs...)
	}
}

// kubeDeleter deletes a lock's object (named as the lock) through the API,
// as the admin: the Lease, the ConfigMap or the DistributedLock.
func kubeDeleter(t *testing.T, cfg *rest.Config, name, ns string) func(context.Context, string) error {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, lock string) error {
		switch name {
		case "lease":
			return cs.CoordinationV1().Leases(ns).Delete(ctx, lock, metav1.DeleteOptions{})
		case "configmap":
			return cs.CoreV1().ConfigMaps(ns).Delete(ctx, lock, metav1.DeleteOptions{})
		default:
			return dyn.Resource(v1alpha1.Resource).Namespace(ns).Delete(ctx, lock, metav1.DeleteOptions{})
		}
	}
}

// kubeAnnotator writes annotation i of another tool on a lock's object
// (kubectl annotate --overwrite), a merge patch of its metadata alone.
func kubeAnnotator(t *testing.T, cfg *rest.Config, name, ns string) func(context.Context, string, int) error {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gvr := kubeResource(name)
	return func(ctx context.Context, lock string, i int) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"safety.example.com/touched":"%d"}}}`, i)
		_, err := dyn.Resource(gvr).Namespace(ns).Patch(ctx, lock, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
}

// kubeResource is the resource of the Kubernetes backend name's lock
// objects (lease, configmap or crd).
func kubeResource(name string) schema.GroupVersionResource {
	switch name {
	case "lease":
		return schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	case "configmap":
		return schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	default:
		return v1alpha1.Resource
	}
}

// crdPath is the DistributedLock CRD that deploy/ ships.
const crdPath = "../../deploy/crd/baton.dev_distributedlocks.yaml"

// crdEnv is the DistributedLock backend: the CRD from deploy/crd is
// installed on the shared control plane on first use.
func crdEnv(t *testing.T) *backendEnv {
	cfg := controlPlane(t)
	crdOnce.Do(func() {
		_, crdErr = envtest.InstallCRDs(rest.CopyConfig(cfg), envtest.CRDInstallOptions{
			Paths: []string{crdPath}, ErrorIfPathMissing: true,
		})
	})
	if crdErr != nil {
		t.Fatalf("installing %s: %v", crdPath, crdErr)
	}
	return leaseEnv(t, "crd")
}
