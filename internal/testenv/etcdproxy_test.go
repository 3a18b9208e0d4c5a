package testenv

import (
	"net/http"
	"testing"
	"time"
)

// TestEtcdProxy: a grpc-proxy in front of a member answers /proxy/health
// once it reaches the member, keeps its port across Kill and Start, and
// reports the member's death on /proxy/health.
func TestEtcdProxy(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t, EtcdNoFsync())
	p := StartEtcdProxy(t, []*Etcd{e}, EtcdProxyNamespace("/svc-a/"))
	port := p.Port
	p.Kill()
	if p.Running() {
		t.Fatal("Running() after Kill")
	}
	p.Start()
	if p.Port != port {
		t.Fatalf("port %d after Start, was %d", p.Port, port)
	}
	e.Kill()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(p.Endpoint() + "/proxy/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("/proxy/health: %s with the member killed, want an error status", resp.Status)
	}
}
