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
// keys, and its queue). It sends one transaction whose condition is never
// true and whose operations are those reads and writes: etcd checks the
// user's permission for every operation a transaction names before it
// evaluates the condition, and then runs none of them.
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
	claim, last, queue := s.Keys(name)
	ops := []clientv3.Op{clientv3.OpGet(s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())}
	for _, k := range []string{claim, last, s.releasedKey(name), s.guardKey(name)} {
		ops = append(ops, clientv3.OpPut(k, ""))
	}
	ops = append(ops, clientv3.OpDelete(queue, clientv3.WithPrefix()))
	never := clientv3.Compare(clientv3.Version(claim), "<", 0) // a key's version is never negative
	resp, err := s.client.Txn(ctx).If(never).Then(ops...).Commit()
	switch {
	case err != nil && errors.Is(mapErr(err), backend.ErrForbidden):
		return fmt.Errorf("%w (the user needs read and write permission on the key range of the prefix %q: etcdctl role grant-permission --prefix ROLE readwrite %s)",
			s.wrap(name, "check permissions", err), s.prefix, s.prefix)
	case err != nil:
		return s.wrap(name, "check permissions", err)
	case resp.Succeeded:
		// Cannot happen; if it did, the writes ran: say so rather than pass.
		return fmt.Errorf("etcdstore: lock %q: check permissions: the never-true condition held, and the check's writes ran", name)
	}
	return nil
}
