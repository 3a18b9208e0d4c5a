package etcdstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
)

// A CA rotated under a holder, as cert-manager or Vault rotate it: the
// bundle in Config.CAFile gets the new CA beside the old, the member's
// certificate is reissued by the new CA (etcd reads its files again at
// each handshake), the old CA leaves the bundle; after each step every
// connection is closed. The Store reconnects each time and the holder
// keeps its lock. Before, CAFile was read once: after the reissue no new
// connection could be verified ("certificate signed by unknown
// authority"), and every holder lost its lock at its renew deadline.
func TestCARotated(t *testing.T) {
	old, _ := testenv.WriteTLSFiles(t)
	renewed, _ := testenv.WriteTLSFiles(t) // the new CA, and a certificate it signed
	dir := t.TempDir()
	served := testenv.EtcdTLS{CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), CAFile: filepath.Join(dir, "server-ca.crt")}
	testenv.InstallFile(t, served.CertFile, old.CertFile)
	testenv.InstallFile(t, served.KeyFile, old.KeyFile)
	testenv.InstallFile(t, served.CAFile, old.CAFile)
	srv := startEtcd(t, testenv.WithEtcdTLS(served))
	proxy := startFaultProxy(t, srv.Addr())
	bundle := filepath.Join(dir, "ca.crt")
	testenv.InstallFile(t, bundle, old.CAFile)

	s, err := etcdstore.OpenStore(t.Context(), etcdstore.Config{Endpoints: []string{"https://" + proxy.Addr()}, CAFile: bundle},
		etcdstore.WithLogger(quietLog), etcdstore.WithPrefix(freshPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	renewed2 := make(chan struct{}, 1)
	holder := lock(t, newMutex(t, s, "job", "holder", 15*time.Second, baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
		if e.Kind == baton.EventRenewed {
			select {
			case renewed2 <- struct{}{}:
			default:
			}
		}
	}))))

	steps := []struct {
		name string
		do   func()
	}{
		{"the bundle holds both CAs", func() { testenv.InstallFile(t, bundle, old.CAFile, renewed.CAFile) }},
		{"the member's certificate is reissued by the new CA", func() {
			testenv.InstallFile(t, served.KeyFile, renewed.KeyFile)
			testenv.InstallFile(t, served.CertFile, renewed.CertFile)
		}},
		{"the old CA leaves the bundle", func() { testenv.InstallFile(t, bundle, renewed.CAFile) }},
	}
	for _, step := range steps {
		step.do()
		proxy.Reset()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := s.List(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %s, no request succeeded on a new connection: %v", step.name, err)
		}
	}
	select {
	case <-renewed2:
	default:
	}
	within(t, 15*time.Second, "a renewal after the rotation", renewed2)
	if err := holder.Err(); err != nil {
		t.Errorf("the holder lost its lock: %v", err)
	}
}

// A member whose certificate no CA in Config.CAFile signed (the old CA
// removed from the bundle before the members were reissued) fails Open as
// a misconfiguration that names the CA file, which the CLI reports with
// exit 78. Before, the error said only that the authority was unknown,
// and to "give the CA file that signed it".
func TestOpenNamesCAFile(t *testing.T) {
	old, _ := testenv.WriteTLSFiles(t)
	other, _ := testenv.WriteTLSFiles(t)
	srv := startEtcd(t, testenv.WithEtcdTLS(testenv.EtcdTLS{CertFile: old.CertFile, KeyFile: old.KeyFile, CAFile: old.CAFile}))
	err := openFails(t, "with a bundle of another CA", etcdstore.Config{Endpoints: srv.Endpoints(), CAFile: other.CAFile})
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "unknown authority") || !strings.Contains(err.Error(), other.CAFile) {
		t.Errorf("Open with a bundle of another CA: %v, want ErrMisconfigured naming the unknown authority and %s", err, other.CAFile)
	}
}

// A holder whose member's certificate was reissued by a CA its bundle
// lacks (the old CA removed before the members were reissued) steps down
// at its renew deadline with a loss that names the failed verification
// and the CA file, matching backend.ErrMisconfigured, so that baton lock
// and run exit 78 as on Redis. Before, the loss said only that "a renew
// had no answer" (ErrUnavailable, exit 1), and the etcd client's logs
// alone held the cause.
func TestCAMismatchNamedInLoss(t *testing.T) {
	old, proxy, reissue := startReissued(t)
	s, err := etcdstore.OpenStore(t.Context(), etcdstore.Config{Endpoints: []string{"https://" + proxy.Addr()}, CAFile: old.CAFile},
		etcdstore.WithLogger(quietLog), etcdstore.WithPrefix(freshPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	holder := lock(t, newMutex(t, s, "job", "holder", 2*time.Second))
	reissue()
	within(t, 20*time.Second, "the holder to step down", holder.Done())
	if err := holder.Err(); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "unknown authority") || !strings.Contains(err.Error(), old.CAFile) {
		t.Errorf("the holder's loss: %v, want ErrMisconfigured naming the unknown authority and %s", err, old.CAFile)
	}
	// An attempt to take the lock says the same, not "is etcd running?".
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := newMutex(t, s, "job", "standby", 2*time.Second).TryLock(ctx); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), old.CAFile) {
		t.Errorf("TryLock: %v, want ErrMisconfigured naming %s", err, old.CAFile)
	}
}
