package etcdstore_test

import (
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// TestCheckPermissions: with etcd's authentication on, a user whose role
// may read and write the prefix passes, and the check writes nothing (the
// revision stays); a user that may only read it, or has no role, gets
// ErrForbidden, though the reader may Get the lock. With authentication
// off every user passes.
func TestCheckPermissions(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	ctx := t.Context()
	root := connect(t, srv.Endpoint())
	if err := newStore(t, root, etcdstore.WithPrefix(prefix)).CheckPermissions(ctx, "job"); err != nil {
		t.Errorf("with authentication off: %v, want nil", err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	must(root.RoleAdd(ctx, "root"))
	must(root.UserAdd(ctx, "root", "root-pw"))
	must(root.UserGrantRole(ctx, "root", "root"))
	for role, perm := range map[string]clientv3.PermissionType{"locker": clientv3.PermissionType(clientv3.PermReadWrite), "reader": clientv3.PermissionType(clientv3.PermRead)} {
		must(root.RoleAdd(ctx, role))
		must(root.RoleGrantPermission(ctx, role, prefix, end, perm))
		must(root.UserAdd(ctx, role, role+"-pw"))
		must(root.UserGrantRole(ctx, role, role))
	}
	must(root.UserAdd(ctx, "stranger", "stranger-pw"))
	must(root.AuthEnable(ctx))

	as := func(user string) *etcdstore.Store {
		return newStore(t, openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: user, Password: user + "-pw"})(), etcdstore.WithPrefix(prefix))
	}
	admin := openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "root", Password: "root-pw"})()
	rev := func() int64 {
		t.Helper()
		resp, err := admin.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("%d keys under the prefix, want none: the check wrote", resp.Count)
		}
		return resp.Header.Revision
	}
	r0 := rev()
	if err := as("locker").CheckPermissions(ctx, "job"); err != nil {
		t.Errorf("a user with read and write permission on the prefix: %v, want nil", err)
	}
	if r1 := rev(); r1 != r0 {
		t.Errorf("revision %d after the check, %d before: the check wrote", r1, r0)
	}
	if _, err := as("reader").Get(ctx, "job"); err != nil && !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get by a user that may read the prefix: %v", err)
	}
	for _, user := range []string{"reader", "stranger"} {
		err := as(user).CheckPermissions(ctx, "job")
		t.Logf("%s: %v", user, err)
		if !errors.Is(err, backend.ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", user, err)
		}
	}

	// Remove needs no more than the check asks for, and names the fix.
	if err := as("locker").Remove(ctx, "job"); err != nil {
		t.Errorf("Remove by a user with read and write permission on the prefix: %v, want nil", err)
	}
	if err := as("reader").Remove(ctx, "job"); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "grant-permission") {
		t.Errorf("Remove by a user that may only read the prefix: %v; want ErrForbidden naming the permission to grant", err)
	}
}
