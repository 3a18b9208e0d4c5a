package cli_test

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// A CA rotated as cert-manager or Vault rotates it, under a holder: the
// trust bundle (--cacert) first holds the old and the new CA, then the
// server's certificate is reissued by the new CA, then the old CA leaves
// the bundle. At each step the server drops its clients, and the holder
// renews on a new connection. Before, --cacert was read once at start:
// once the server presented the new CA's certificate, every new
// connection failed with "certificate signed by unknown authority", and
// the holder stepped down at its renew deadline, as every replica would,
// with none able to take the lock until restarted.
func TestRedisCARotated(t *testing.T) {
	t.Parallel()
	old, oldCAs := testenv.WriteTLSFiles(t)
	renewed, _ := testenv.WriteTLSFiles(t) // the new CA and a certificate it signed
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(old))
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	testenv.InstallFile(t, bundle, old.CAFile)

	ctx := t.Context()
	// One connection, opened before the rotation, which CLIENT KILL skips.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxIdleConns: 1, ConnMaxIdleTime: -1,
		TLSConfig: &tls.Config{RootCAs: oldCAs}})
	defer admin.Close()

	holder := startCLI(t, "holder", nil, append([]string{"lock", "--backend", "redis", "--redis-url", srv.URL(),
		"--cacert", bundle, "--name", "job", "--log-level", "debug"},
		append(timing, "--", "sleep", "600")...)...)
	holder.stderr.waitFor(t, "acquired", 15*time.Second)

	steps := []struct {
		name string
		do   func()
	}{
		{"the bundle holds both CAs", func() { testenv.InstallFile(t, bundle, old.CAFile, renewed.CAFile) }},
		{"the server's certificate is reissued by the new CA", func() {
			if err := admin.Do(ctx, "CONFIG", "SET", "tls-cert-file", renewed.CertFile, "tls-key-file", renewed.KeyFile).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"the old CA leaves the bundle", func() { testenv.InstallFile(t, bundle, renewed.CAFile) }},
	}
	for _, step := range steps {
		step.do()
		killAndAwaitRenewal(t, admin, holder, step.name)
	}
	stopHolder(t, holder)
}

// doctor on an etcd whose certificate no CA in --cacert signed (the old
// CA removed before the members were reissued): the endpoint's row names
// the failed verification and the CA file, as the store row does. Before,
// the row read "no answer in time: context deadline exceeded", with the
// fix "check the address, the network path and the store's load".
func TestDoctorEtcdUnknownCA(t *testing.T) {
	t.Parallel()
	files, _ := testenv.WriteTLSFiles(t)
	other, _ := testenv.WriteTLSFiles(t)
	e := testenv.StartEtcd(t, testenv.WithEtcdTLS(testenv.EtcdTLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile}))
	code, out, stderr := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", e.Endpoint(), "--cacert", other.CAFile, "--name", "job")
	row, ok := doctorTable(t, out)["etcd "+e.Endpoint()]
	if code != 1 || !ok || row.result != "FAIL" || !strings.Contains(row.detail, "unknown authority") || !strings.Contains(row.detail, other.CAFile) {
		t.Errorf("doctor exited %d; the endpoint's row is %+v, want FAIL naming the unknown authority and %s:\n%s\n%s", code, row, other.CAFile, out, stderr)
	}
}
