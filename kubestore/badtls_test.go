package kubestore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/rest"
)

// A rest.Config whose TLS material cannot be parsed (a kubeconfig with a
// truncated certificate-authority-data, a client certificate that is not
// PEM) is a setup that cannot work: the *ForConfig constructors say so
// with backend.ErrMisconfigured, which baton lock and run report with exit
// 78, instead of an unclassified error (exit 1, and a doctor row that only
// said "error").
func TestForConfigBadTLS(t *testing.T) {
	for name, tls := range map[string]rest.TLSClientConfig{
		"ca":   {CAData: []byte("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJ1VENDQVY2")},
		"cert": {CertData: []byte("not a certificate"), KeyData: []byte("not a key")},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: tls}
			_, err := kubestore.NewLeaseForConfig(cfg, "ns")
			if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "TLS") {
				t.Errorf("NewLeaseForConfig: %v; want ErrMisconfigured naming the TLS settings", err)
			}
			_, err = kubestore.NewDistributedLockForConfig(cfg, "ns")
			if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "TLS") {
				t.Errorf("NewDistributedLockForConfig: %v; want ErrMisconfigured naming the TLS settings", err)
			}
		})
	}
}

// A certificate that does not list the name dialled, as behind a proxy, a
// tunnel or a load balancer under another name (here, a TLS server name
// the API server's certificate does not list): the error names the
// kubeconfig's tls-server-name as the fix too, not only "use a host name
// the certificate lists", which a client behind such a proxy cannot.
func TestHostnameMismatchNamesTLSServerName(t *testing.T) {
	cfg := rest.CopyConfig(controlPlane(t))
	cfg.ServerName = "api.example.test"
	s, err := kubestore.NewLeaseForConfig(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(t.Context(), "tls-name")
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "tls-server-name") || !strings.Contains(err.Error(), "kubectl config set-cluster") {
		t.Fatalf("Get through a name the certificate does not list: %v; want ErrMisconfigured naming tls-server-name", err)
	}
}

// A server address without a scheme is taken by client-go as http:// when
// the configuration has no CA, client certificate or insecure flag (a
// kubeconfig with a token only): the API server answers plain HTTP with
// 400 "Client sent an HTTP request to an HTTPS server", which read as "the
// server rejected our request for an unknown reason" (exit 1). The error
// matches backend.ErrMisconfigured and names the fix.
func TestPlainHTTPToTLSServer(t *testing.T) {
	cfg := rest.CopyConfig(controlPlane(t))
	cfg.Host = strings.TrimPrefix(cfg.Host, "https://")
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	s, err := kubestore.NewLeaseForConfig(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(t.Context(), "plain-http")
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "https://") {
		t.Fatalf("Get over plain HTTP from a server without a scheme: %v; want ErrMisconfigured naming https://", err)
	}
}
