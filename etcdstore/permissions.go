package etcdstore

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backend"
)

// CheckPermissions asks etcd whether the Store's user may do what the
// Store does for lock name: read the Store's prefix (List, and the watches)
// and write each key of the lock (its claim, last, released and guard
// keys, and every key under its name: its queue, and what Remove deletes).
// It sends one transaction whose condition is never true and whose
// operations are those reads and writes: etcd checks the user's permission
// for every operation a transaction names before it evaluates the
// condition, and then runs none of them.
//
// It returns nil if etcd allowed the transaction, or an error matching
// backend.ErrForbidden if it refused it (etcd does not say which key; the
// fix is read and write permission on the prefix's key range, see
// "Permissions" in the package documentation), or the store error of a
// cluster that did not answer. With authentication off every user may do
// everything, and it returns nil. A role's permissions can change at any
// time; nil says they sufficed when etcd answered.
func (s *Store) CheckPermissions(ctx context.Context, name string) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	claim, _, _ := s.Keys(name)
	// Deleting the range of every key under the lock's name (its last and
	// released keys and its queue: what Remove deletes) needs write
	// permission on that whole range, which covers the puts of the last
	// and released keys; etcd refuses a transaction that both puts a key
	// and deletes a range that holds it.
	ops := []clientv3.Op{clientv3.OpGet(s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpPut(claim, ""), clientv3.OpPut(s.guardKey(name), ""), clientv3.OpDelete(claim+"/", clientv3.WithPrefix())}
	never := clientv3.Compare(clientv3.Version(claim), "<", 0) // a key's version is never negative
	resp, err := s.client.Txn(ctx).If(never).Then(ops...).Commit()
	switch {
	case err != nil:
		return s.permissionFix(s.wrap(name, "check permissions", err))
	case resp.Succeeded:
		// Cannot happen; if it did, the writes ran: say so rather than pass.
		return fmt.Errorf("etcdstore: lock %q: check permissions: the never-true condition held, and the check's writes ran", name)
	}
	return nil
}

// permissionFix adds to err, if it matches backend.ErrForbidden, the
// permission that the Store's user needs (see "Permissions" in the package
// documentation).
func (s *Store) permissionFix(err error) error {
	if !errors.Is(err, backend.ErrForbidden) {
		return err
	}
	return fmt.Errorf("%w (the user needs read and write permission on the key range of the prefix %q: etcdctl role grant-permission --prefix ROLE readwrite %s)",
		err, s.prefix, s.prefix)
}
