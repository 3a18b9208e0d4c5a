package kubestore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// boundToken returns a token of service account sa bound to a new Secret
// named secret: deleting the Secret revokes the token, as deleting a pod
// revokes its projected token.
func boundToken(t *testing.T, cs kubernetes.Interface, ns, sa, secret string) string {
	t.Helper()
	ctx := t.Context()
	s, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret, UID: s.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// lockerAccount creates service account "locker" in ns with the Role a
// Lease lock needs.
func lockerAccount(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "locker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "locker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "locker"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "locker"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "locker", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeAtomically replaces path's content by a rename, as the kubelet
// updates a projected token.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A holder runs with a service account token read from a file (a pod's
// projected token, a kubeconfig's tokenFile). The kubelet writes a new
// token and the old one is revoked: the holder goes on renewing with the
// new one (client-go reads the file again). Then the token in the file is
// revoked with nothing to replace it (its ServiceAccount or bound object
// deleted): the API server answers 401, and the holder steps down at its
// renew deadline, its loss naming the likely causes and how to check the
// credentials. Before, the loss said only "the API server did not accept
// the credentials (Unauthorized)".
func TestServiceAccountTokenRotatedAndRevoked(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	lockerAccount(t, cs, ns)
	first, second := boundToken(t, cs, ns, "locker", "first"), boundToken(t, cs, ns, "locker", "second")
	file := filepath.Join(t.TempDir(), "token")
	writeAtomically(t, file, first)
	user := rest.AnonymousClientConfig(cfg)
	user.BearerTokenFile = file
	st, err := kubestore.NewLeaseForConfig(user, ns)
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan struct{}, 100)
	m, err := baton.NewMutex(st, "job", baton.WithIdentity("a"), baton.WithTTL(3*time.Second), baton.WithLogger(slog.New(slog.DiscardHandler)),
		baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
			if e.Kind == baton.EventRenewed {
				select {
				case renewed <- struct{}{}:
				default:
				}
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())

	writeAtomically(t, file, second)
	if err := cs.CoreV1().Secrets(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for len(renewed) > 0 {
		<-renewed
	}
	for range 3 {
		select {
		case <-renewed:
		case <-l.Done():
			t.Fatalf("the holder lost its lock after its token file was rotated: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("no renewal after the token file was rotated")
		}
	}

	if err := cs.CoreV1().Secrets(ns).Delete(ctx, "second", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the holder did not step down after its token was revoked")
	}
	if err := l.Err(); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "kubectl auth whoami") {
		t.Errorf("the holder's loss: %v; want ErrForbidden naming the causes of a 401 and how to check the credentials", err)
	}
}
