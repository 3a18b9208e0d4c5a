package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An administrator changes the password of the user a holder connects as
// (etcdctl user passwd), or removes its role's permission on the prefix
// (etcdctl role revoke-permission), while it holds a lock. etcd refuses
// the holder's keepalives and verifications from then on; the holder
// steps down at its renew deadline, and its loss names etcd's refusal and
// the fix (ErrForbidden). Before, Renew waited for an answer that never
// came, and the loss said only "a renew had no answer after 400ms (the
// retry period)", an unreachable store, sending the operator to the
// network.
func TestCredentialsRevokedWhileHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		revoke func(ctx context.Context, root *clientv3.Client, prefix string) error
		want   string
	}{
		{"password changed", func(ctx context.Context, root *clientv3.Client, _ string) error {
			_, err := root.UserChangePassword(ctx, "locker", "new-pw")
			return err
		}, "authentication failed"},
		{"permission revoked", func(ctx context.Context, root *clientv3.Client, prefix string) error {
			_, err := root.RoleRevokePermission(ctx, "locker", prefix, clientv3.GetPrefixRangeEnd(prefix))
			return err
		}, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEtcd(t)
			prefix := freshPrefix(t)
			ctx := t.Context()
			enableAuth(t, connect(t, srv.Endpoint()), prefix)
			admin := openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "root", Password: "root-pw"})()

			s := newStore(t, openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "locker", Password: "locker-pw"})(),
				etcdstore.WithPrefix(prefix))
			l := lock(t, newMutex(t, s, "job", "a", 3*time.Second))
			if err := tc.revoke(ctx, admin, prefix); err != nil {
				t.Fatal(err)
			}
			within(t, 30*time.Second, "the holder's step-down", l.Done())
			if err := l.Err(); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the holder's loss: %v; want ErrForbidden naming etcd's refusal (%q)", err, tc.want)
			}
		})
	}
}
