package testenv

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// etcdKV talks to etcd's JSON gateway (/v3/kv/...), so these tests need no
// etcd client library.
type etcdKV struct {
	t      *testing.T
	e      *Etcd
	client *http.Client
}

func newEtcdKV(t *testing.T, e *Etcd, tlsConfig *tls.Config) *etcdKV {
	return &etcdKV{t: t, e: e, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true},
	}}
}

func (kv *etcdKV) call(path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := kv.client.Post(kv.e.Endpoint()+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		return fmt.Errorf("%s: %s %s", path, r.Status, b.String())
	}
	return json.NewDecoder(r.Body).Decode(resp)
}

func (kv *etcdKV) put(key, value string) {
	kv.t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	if err := kv.call("/v3/kv/put", map[string]string{"key": b64([]byte(key)), "value": b64([]byte(value))}, &struct{}{}); err != nil {
		kv.t.Fatalf("put %s: %v", key, err)
	}
}

// putAcrossElection is put for a write sent while the cluster may still be
// settling a leader change: etcd answers 503 ("request timed out", "leader
// changed") until the member it reached follows the new leader, so the
// write is retried, at a short pace, for up to a minute. A put is
// idempotent.
func (kv *etcdKV) putAcrossElection(key, value string) {
	kv.t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	deadline := time.Now().Add(time.Minute)
	for {
		err := kv.call("/v3/kv/put", map[string]string{"key": b64([]byte(key)), "value": b64([]byte(value))}, &struct{}{})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "503") || time.Now().After(deadline) {
			kv.t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond) // a retry pace, not a wait for an event
	}
}

func (kv *etcdKV) get(key string) (string, error) {
	var resp struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := kv.call("/v3/kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))}, &resp); err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", errors.New("not found")
	}
	v, err := base64.StdEncoding.DecodeString(resp.Kvs[0].Value)
	return string(v), err
}

func (kv *etcdKV) mustGet(key string) string {
	kv.t.Helper()
	v, err := kv.get(key)
	if err != nil {
		kv.t.Fatalf("get %s: %v", key, err)
	}
	return v
}

func TestEtcdRestartKeepsData(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	if !strings.HasPrefix(e.Endpoint(), "http://127.0.0.1:") || len(e.Endpoints()) != 1 {
		t.Fatalf("Endpoint() = %q", e.Endpoint())
	}
	kv := newEtcdKV(t, e, nil)
	kv.put("a", "1")
	if v := kv.mustGet("a"); v != "1" {
		t.Fatalf("a = %q, want 1", v)
	}

	port := e.ClientPort
	e.Stop()
	if e.Running() {
		t.Fatal("Running() after Stop")
	}
	if _, err := kv.get("a"); err == nil {
		t.Fatal("a stopped etcd answered")
	}
	e.Start()
	if e.ClientPort != port {
		t.Fatalf("port changed across restart: %d -> %d", port, e.ClientPort)
	}
	if v := kv.mustGet("a"); v != "1" {
		t.Fatalf("after Stop/Start: a = %q, want 1", v)
	}

	kv.put("b", "2")
	e.Kill()
	e.Start()
	if v := kv.mustGet("b"); v != "2" {
		t.Fatalf("after Kill/Start: b = %q, want 2", v)
	}
	if !strings.Contains(e.Log(), "baton-test") {
		t.Errorf("Log() does not show the member's output:\n%s", lastLines(e.Log(), 5))
	}
}

func TestEtcdClientCertAuth(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t, WithEtcdClientCertAuth())
	if !strings.HasPrefix(e.Endpoint(), "https://127.0.0.1:") {
		t.Fatalf("Endpoint() = %q, want https", e.Endpoint())
	}
	files, ok := e.TLSFiles()
	if !ok || !files.ClientCertAuth || files.CAFile == "" {
		t.Fatalf("TLSFiles() = %+v, %v", files, ok)
	}

	kv := newEtcdKV(t, e, e.ClientTLS())
	kv.put("k", "v")
	if v := kv.mustGet("k"); v != "v" {
		t.Fatalf("k = %q, want v", v)
	}

	// Trusting the CA is not enough: the server wants a client certificate.
	noCert := e.ClientTLS()
	noCert.Certificates = nil
	if _, err := newEtcdKV(t, e, noCert).get("k"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	// Plain HTTP is not served at all.
	plain := &etcdKV{t: t, e: e, client: &http.Client{Timeout: 5 * time.Second}}
	if err := plain.call("/v3/kv/range", map[string]string{"key": "aw=="}, &struct{}{}); err == nil {
		t.Fatal("plain HTTP was served on a TLS-only client port")
	}

	e.Kill()
	e.Start()
	if v := kv.mustGet("k"); v != "v" {
		t.Fatalf("after Kill/Start: k = %q, want v", v)
	}
}

func TestEtcdServersAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := StartEtcd(t, EtcdNoFsync()), StartEtcd(t, EtcdNoFsync())
	if a.ClientPort == b.ClientPort || a.Dir == b.Dir {
		t.Fatalf("two servers share a port or a directory: %+v %+v", a, b)
	}
	newEtcdKV(t, a, nil).put("only-a", "x")
	if _, err := newEtcdKV(t, b, nil).get("only-a"); err == nil {
		t.Fatal("b sees a's key")
	}
}

// TestEtcdMetricsPortTakenByAnotherEtcd: an etcd whose metrics port is
// another etcd's client port (which serves /health too) fails to start; it
// must not pass for healthy on the other's answer while it shuts down.
// Members of a cluster whose ports collided this way once made a cluster
// of two look like three.
func TestEtcdMetricsPortTakenByAnotherEtcd(t *testing.T) {
	t.Parallel()
	a := StartEtcd(t, EtcdNoFsync())
	bin, err := FindEtcd()
	if err != nil {
		t.Fatal(err)
	}
	b := newEtcd(t, bin, etcdConfig{unsafeSync: true}, "", filepath.Join(t.TempDir(), "data"))
	t.Cleanup(b.Kill)
	ports, err := freePorts(etcdPorts)
	if err != nil {
		t.Fatal(err)
	}
	b.setPorts(ports)
	b.MetricsPort = a.ClientPort
	err = b.start()
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start with a taken metrics port: %v, want an error naming the taken port", err)
	}
	if b.Running() {
		t.Fatal("Running() after a failed start")
	}
}

// TestFreePortsDistinct: ports from one call differ, as a cluster's
// members need.
func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
	}
}

// TestTestbinDirMatchesBuildScript checks that TestbinDir computes the
// directory that tools/testbin/build.sh --print-dir prints. make test runs
// that script with bash, so in CI a missing bash fails the test.
func TestTestbinDirMatchesBuildScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		unavailable(t, "bash, which runs tools/testbin/build.sh, is not installed: %v", err)
	}
	script := filepath.Join("..", "..", "tools", "testbin", "build.sh")
	for _, env := range []map[string]string{
		{},
		{"BATON_TESTBIN_DIR": "", "XDG_CACHE_HOME": "/x/cache"},
		{"BATON_TESTBIN_DIR": "", "XDG_CACHE_HOME": "", "HOME": "/h"},
		{"BATON_TESTBIN_DIR": "/b/testbin"},
	} {
		for k, v := range env {
			t.Setenv(k, v)
		}
		out, err := exec.Command(bash, script, "--print-dir").Output()
		if err != nil {
			t.Fatalf("build.sh --print-dir: %v", err)
		}
		want := strings.TrimSpace(string(out))
		got, err := TestbinDir()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("env %v: TestbinDir() = %q, build.sh --print-dir = %q", env, got, want)
		}
		if !strings.Contains(filepath.Base(got), "k8s-1.") || !strings.Contains(filepath.Base(got), "-etcd-3.") {
			t.Errorf("TestbinDir() = %q: want k8s-<version>-etcd-<version>", got)
		}
	}
}

func TestFindEtcdOrder(t *testing.T) {
	dir := t.TempDir()
	fake := func(sub string) string {
		p := filepath.Join(dir, sub, "etcd")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	explicit, assets := fake("explicit"), fake("assets")
	if err := os.WriteFile(filepath.Join(dir, "assets", "kube-apiserver"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BATON_ETCD_BIN", explicit)
	t.Setenv("KUBEBUILDER_ASSETS", filepath.Dir(assets))
	if p, err := FindEtcd(); err != nil || p != explicit {
		t.Errorf("with BATON_ETCD_BIN: FindEtcd() = %q, %v; want %q", p, err, explicit)
	}
	t.Setenv("BATON_ETCD_BIN", "")
	if p, err := FindEtcd(); err != nil || p != assets {
		t.Errorf("with KUBEBUILDER_ASSETS: FindEtcd() = %q, %v; want %q", p, err, assets)
	}
	if d, err := FindKubeAssets(); err != nil || d != filepath.Dir(assets) {
		t.Errorf("FindKubeAssets() = %q, %v; want %q", d, err, filepath.Dir(assets))
	}

	// Nothing anywhere: the error names the make target.
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("BATON_TESTBIN_DIR", filepath.Join(dir, "empty-cache"))
	t.Setenv("PATH", filepath.Join(dir, "no-such-dir"))
	if _, err := FindEtcd(); err == nil || !strings.Contains(err.Error(), TestbinHint) {
		t.Errorf("FindEtcd() with nothing built: %v; want an error naming %q", err, TestbinHint)
	}
	if _, err := FindKubeAssets(); err == nil || !strings.Contains(err.Error(), TestbinHint) {
		t.Errorf("FindKubeAssets() with nothing built: %v; want an error naming %q", err, TestbinHint)
	}
	t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(dir, "explicit")) // etcd but no kube-apiserver
	if _, err := FindKubeAssets(); err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("FindKubeAssets() without kube-apiserver: %v", err)
	}
}

// TestTestbinHintBuilds: the command the errors above name runs the build
// (tools/testbin/build.sh), so that following the advice builds the
// binaries rather than doing nothing. make -n prints the recipe without
// running it.
func TestTestbinHintBuilds(t *testing.T) {
	args := strings.Fields(TestbinHint)
	if _, err := exec.LookPath(args[0]); err != nil {
		unavailable(t, "%s is not installed: %v", args[0], err)
	}
	root := filepath.Join("..", "..") // this module is internal/testenv
	cmd := exec.Command(args[0], append([]string{"-n", "-C", root}, args[1:]...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tools/testbin/build.sh") {
		t.Errorf("%s -n (in %s): %v\n%s\nwant the recipe to run tools/testbin/build.sh", TestbinHint, root, err, out)
	}
}
