//go:build linux

package safety

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// caKey is the key of the CA bundle in the contenders' Secret volume.
const caKey = "ca.crt"

// caRotation is the CA that signs a store's certificate, which rotateCA
// rotates under the contenders as cert-manager or Vault rotate one. The
// contenders trust the CAs in bundle's caKey, a Secret volume (updated by
// a swap of its "..data" symlink, as the kubelet updates one).
type caRotation struct {
	bundle *testenv.SecretVolume
	// addr is the server's own TLS address (not a contender's proxy).
	addr string
	// serving is the CA that signed the certificate the server presents
	// to new connections, and that certificate with its key.
	serving testenv.RedisTLS
	// reissue has the server present next's certificate to new
	// connections (serving's until it returns) and says how.
	reissue func(t *testing.T, next testenv.RedisTLS) string
	// cutAll closes every contender's connection to the server and says
	// how.
	cutAll func(t *testing.T) string
}

// redisCAEnv runs one redis-server over TLS whose contenders open their
// store as the CLI's --cacert does (redisstore.WithTLSFiles), with
// go-redis's own timeouts. The server's certificate and key are in a
// Secret volume of their own; it is reissued one by CONFIG SET of the
// same paths, which has Redis read them again, and every client
// connection is cut with CLIENT KILL.
func redisCAEnv(t *testing.T) *backendEnv {
	first, _ := testenv.WriteTLSFiles(t)
	served, files := serverVolume(t, first)
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(files))
	rot := &caRotation{bundle: testenv.NewSecretVolume(t, map[string][]string{caKey: {first.CAFile}}), addr: srv.Addr(), serving: first}
	rot.reissue = func(t *testing.T, next testenv.RedisTLS) string {
		served.Update(t, serverKeys(next))
		rot.redisDo(t, rot.serving, "CONFIG", "SET", "tls-cert-file", files.CertFile, "tls-key-file", files.KeyFile)
		return "its Secret volume updated, then CONFIG SET tls-cert-file tls-key-file"
	}
	rot.cutAll = func(t *testing.T) string {
		// A waiter's release notices come on a subscribed connection,
		// which TYPE normal spares.
		n := rot.redisDo(t, rot.serving, "CLIENT", "KILL", "TYPE", "normal")
		p := rot.redisDo(t, rot.serving, "CLIENT", "KILL", "TYPE", "pubsub")
		return fmt.Sprintf("CLIENT KILL TYPE normal and pubsub (%v and %v connections)", n, p)
	}
	return &backendEnv{name: "redis", ttl: ttl, claimLife: ttl, keepsThroughDrop: true,
		caFile: rot.bundle.Path(caKey), rotation: rot,
		newLink: func(*testing.T) link { return local(srv.URL()) }}
}

// redisDo sends one command to the server on a connection of its own
// that trusts the CA of as, and returns the reply.
func (r *caRotation) redisDo(t *testing.T, as testenv.RedisTLS, args ...any) any {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1, TLSConfig: &tls.Config{RootCAs: caPool(t, as.CAFile), MinVersion: tls.VersionTLS12}})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// etcdCAEnv runs one etcd member over TLS whose certificate and key are in
// a Secret volume of their own, which etcd reads again at each handshake;
// the contenders (plain mode) reach it through proxies whose connections
// are reset to cut them all, and trust the CAs in Config.CAFile.
func etcdCAEnv(t *testing.T) *backendEnv {
	first, _ := testenv.WriteTLSFiles(t)
	served, files := serverVolume(t, first)
	srv := testenv.StartEtcd(t, testenv.EtcdNoFsync(),
		testenv.WithEtcdTLS(testenv.EtcdTLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile}))
	rot := &caRotation{bundle: testenv.NewSecretVolume(t, map[string][]string{caKey: {first.CAFile}}), addr: srv.Addr(), serving: first}
	rot.reissue = func(t *testing.T, next testenv.RedisTLS) string {
		served.Update(t, serverKeys(next))
		return "the member's Secret volume updated"
	}
	var (
		mu      sync.Mutex
		proxies []*faultproxy.Proxy
	)
	rot.cutAll = func(*testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range proxies {
			p.Reset()
		}
		return fmt.Sprintf("the connections of %d contenders reset", len(proxies))
	}
	return &backendEnv{name: "etcd", ttl: ttl, claimLife: etcdClaimLife(ttl),
		caFile: rot.bundle.Path(caKey), rotation: rot,
		newLink: func(t *testing.T) link {
			p, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			mu.Lock()
			proxies = append(proxies, p)
			mu.Unlock()
			return local("https://" + p.Addr())
		}}
}

// serverVolume is a server's Secret volume holding first's files, and the
// paths the server reads them at.
func serverVolume(t *testing.T, first testenv.RedisTLS) (*testenv.SecretVolume, testenv.RedisTLS) {
	v := testenv.NewSecretVolume(t, serverKeys(first))
	return v, testenv.RedisTLS{CertFile: v.Path("tls.crt"), KeyFile: v.Path("tls.key"), CAFile: v.Path(caKey)}
}

// serverKeys is a server's Secret (cert-manager's keys) for files.
func serverKeys(files testenv.RedisTLS) map[string][]string {
	return map[string][]string{"tls.crt": {files.CertFile}, "tls.key": {files.KeyFile}, caKey: {files.CAFile}}
}

// rotateCA rotates the store's CA while the contenders hold and wait, in
// cert-manager's steps: (1) the contenders' bundle holds the old CA and
// a new one; (2) the server is reissued a certificate by the new CA; (3)
// every contender connection is cut, so that each must reconnect and
// verify the new certificate; (4) the old CA leaves the bundle, and every
// connection is cut again. After each cut the lock must be taken again
// (caCut), and after the last every live contender must have reached the
// store on a new connection: acquired, or found a claim taken after the
// cut held. A client that read its CA bundle once trusts the old CA
// alone, and reconnects to nothing from step 3 on.
func (h *harness) rotateCA() {
	h.t.Helper()
	rot := h.be.rotation
	tok := h.working(3, 30*time.Second)
	old := rot.serving
	next, _ := testenv.WriteTLSFiles(h.t)
	rot.bundle.Update(h.t, map[string][]string{caKey: {old.CAFile, next.CAFile}})
	how := rot.reissue(h.t, next)
	rot.serving = next
	rot.presents(h.t, next)
	h.t.Logf("under token %d: the bundle holds the old and the new CA; the server's certificate reissued by the new CA (%s)", tok, how)
	h.caCut("every connection cut under the new certificate")
	rot.bundle.Update(h.t, map[string][]string{caKey: {next.CAFile}})
	cut, top := h.caCut("the old CA removed from the bundle and every connection cut")
	h.reconnected(cut, top)
}

// caCut cuts every connection, one step of a CA rotation (what), and
// waits for an acquisition of a token larger than any before the cut, and
// three writes with it: the store answered after the cut (a write alone would not show it: a holder goes on writing until
// its renew deadline). The lock must not have gone unheld longer than the
// liveness bound meanwhile: from the cut, or the last tenure's end after
// it, to that acquisition (takeover). It returns when the cut began, and
// the largest token acquired by then.
func (h *harness) caCut(what string) (time.Duration, uint64) {
	h.t.Helper()
	from, top := h.reg.now(), h.topToken()
	what += ": " + h.be.rotation.cutAll(h.t)
	defer func() { h.disturb("", from, h.reg.now()+h.be.ttl, faultCARotated) }()
	acq, _ := h.acquiredAfter(top, h.be.bound()+30*time.Second)
	idle := from
	_, evs := h.reg.history()
	for _, e := range evs {
		if e.Kind == "releasing" && e.At > idle && e.At < acq.At {
			idle = e.At
		}
	}
	h.takeover(what, acq.At-idle)
	h.writesAbove(top, 3, 30*time.Second)
	h.t.Logf("%s: %s acquired token %d %v after it, the lock unheld for %v before",
		what, acq.C, acq.Tok, (acq.At - from).Round(time.Millisecond), (acq.At - idle).Round(time.Millisecond))
	return from, top
}

// topToken is the largest token acquired so far.
func (h *harness) topToken() uint64 {
	_, evs := h.reg.history()
	var top uint64
	for _, e := range evs {
		if e.Kind == "acquired" {
			top = max(top, e.Tok)
		}
	}
	return top
}

// reconnected waits until every contender alive has reached the store
// since the cut at from, when top was the largest token: it acquired a
// larger token, or found the claim of one held ("seen": a claim that did
// not exist before the cut).
func (h *harness) reconnected(from time.Duration, top uint64) {
	h.t.Helper()
	var ids []string
	h.mu.Lock()
	for id, c := range h.contenders {
		if !c.killed {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	h.reg.await(fmt.Sprintf("each of %v to acquire a token above %d, or find one held, after the old CA left the bundle", ids, top),
		h.be.bound()+30*time.Second, func(s *snapshot) bool {
			return !slices.ContainsFunc(ids, func(id string) bool {
				return !slices.ContainsFunc(s.events, func(e event) bool {
					return e.C == id && e.At > from && e.Tok > top && (e.Kind == "acquired" || e.Kind == "seen")
				})
			})
		})
}

// presents checks that the server presents to a new connection a
// certificate that next's CA signed.
func (r *caRotation) presents(t *testing.T, next testenv.RedisTLS) {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{RootCAs: caPool(t, next.CAFile), MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(t.Context(), "tcp", r.addr)
	if err != nil {
		t.Fatalf("after the reissue, the server's certificate is not the new CA's: %v", err)
	}
	_ = conn.Close()
}

// caPool is a pool of the CAs in file.
func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", file)
	}
	return pool
}
