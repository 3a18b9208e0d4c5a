package storeerr_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
)

// A proxy that answers CONNECT with 407 Proxy Authentication Required
// (here a kubeconfig's proxy-url, as rest.Config.Proxy gives it) makes the
// request's error a misconfiguration that says so and names the fix; it
// was left unclassified ("Proxy Authentication Required" alone), which the
// CLI reported with exit 1.
func TestProxyAuthRequiredClassified(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
	}))
	defer proxy.Close()
	u, _ := url.Parse(proxy.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	defer tr.CloseIdleConnections()
	_, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://store.invalid:6443/")
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrMisconfigured) || !strings.Contains(got.Error(), "407 Proxy Authentication Required") || !strings.Contains(got.Error(), "USER:PASSWORD@") {
		t.Errorf("Classify(%v) = %v; want ErrMisconfigured naming the 407 and the fix", err, got)
	}
}
