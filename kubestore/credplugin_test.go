package kubestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A kubeconfig whose exec credential plugin (aws eks get-token,
// gke-gcloud-auth-plugin, kubelogin) is not installed where baton runs,
// as in an image built FROM baton's: no attempt can succeed, so the
// error matches backend.ErrMisconfigured (baton lock and run exit 78)
// and says to install the plugin. It was unclassified (exit 1).
func TestCredentialPluginMissing(t *testing.T) {
	cfg := &rest.Config{
		Host:            "https://127.0.0.1:1",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		ExecProvider: &clientcmdapi.ExecConfig{
			APIVersion:      "client.authentication.k8s.io/v1beta1",
			Command:         "baton-test-no-such-credential-plugin",
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		},
	}
	s, err := kubestore.NewLeaseForConfig(cfg, "ns")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(context.Background(), "x")
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "credential plugin") {
		t.Errorf("Get with a missing credential plugin: %v; want ErrMisconfigured naming the credential plugin", err)
	}
}
