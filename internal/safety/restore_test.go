//go:build linux

package safety

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/internal/testenv"
)

// snapshotBump is the --bump-revision of each restore: above the revisions
// a round writes between its snapshot and its restore (a few thousand),
// so that tokens go on increasing across the restore.
const snapshotBump = 1_000_000

// restoreSnapshot restores the store from a snapshot taken earlier in the
// round, as an operator recovering etcd would (docs/backends.md: etcdutl
// snapshot restore --bump-revision --mark-compacted). The snapshot is
// taken right after one of a holder's accepted writes; once the lock has
// changed hands since, the store is killed right after another accepted
// write, restored and started. The restored store has the snapshot's
// claims, on the snapshot's leases (restored with their full TTL),
// whether or not their holders still keep them, and not the claim of the
// holder at the restore, whose lease may or may not be restored with it.
// Its Store must learn that its claim is gone, nobody may take the lock
// while a claim someone saw may still be held, tokens must go on
// increasing (the bump) and the lock must go on within the liveness bound
// of the restart: the checker sees no repeated token, no two holders and
// no stale write accepted.
func (h *harness) restoreSnapshot(minWrites int) {
	h.t.Helper()
	var (
		path string
		err  error
	)
	snap := h.waitFired(h.arm(false, minWrites, func(string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		path, err = h.be.snapshot(ctx)
	}), "snapshot")
	if err != nil {
		h.t.Fatalf("snapshot under %s's token %d: %v", snap.c, snap.tok, err)
	}
	if _, ok := h.acquiredAfter(snap.tok, 60*time.Second); !ok {
		h.t.Fatalf("no acquisition after token %d, the snapshot's", snap.tok)
	}
	h.writesAbove(snap.tok, 3, 30*time.Second)
	// The holder at the restore keeps its lease until the lease's
	// context ends: the engine must end it.
	f := h.waitFired(h.armHold(false, true, 3+h.rng.IntN(5), func(string) { h.be.kill() }), "restore")
	h.be.restoreSnapshot(h.t, path)
	back := h.reg.now()
	h.disturb("", f.at, back+h.be.bound(), "snapshot restore")
	end := h.tenureEnd(f.c, f.tok, h.be.bound()+30*time.Second)
	next, ok := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
	if !ok {
		h.t.Fatalf("no acquisition after token %d, the last before the restore", f.tok)
	}
	h.t.Logf("snapshot under %s's token %d; store killed under %s's token %d and restored, back %v later; %s's tenure ended (%s) %v after, %s acquired token %d %v after",
		snap.c, snap.tok, f.c, f.tok, (back - f.at).Round(time.Millisecond), f.c, end.Cause,
		(end.At - back).Round(time.Millisecond), next.C, next.Tok, (next.At - back).Round(time.Millisecond))
	h.takeover(fmt.Sprintf("snapshot restored under token %d", f.tok), next.At-back)
	h.writesAbove(f.tok, 3, 30*time.Second)
}

// etcdSnapshots gives etcdEnv's store its snapshot, kill and restore.
func etcdSnapshots(t *testing.T, be *backendEnv, srv *testenv.Etcd, admin etcdAdmin) {
	dir := t.TempDir()
	n := 0
	be.snapshot = func(ctx context.Context) (string, error) {
		n++
		path := filepath.Join(dir, fmt.Sprintf("snapshot-%d.db", n))
		return path, admin.do(func(cli *clientv3.Client) error { return saveSnapshot(ctx, cli, path) })
	}
	be.kill = srv.Kill
	be.restoreSnapshot = func(t *testing.T, path string) {
		if err := srv.RestoreSnapshot(path, snapshotBump); err != nil {
			t.Fatalf("restoring %s: %v", path, err)
		}
		srv.Start()
	}
}

// saveSnapshot writes the member's snapshot to path (etcdctl snapshot
// save).
func saveSnapshot(ctx context.Context, cli *clientv3.Client, path string) error {
	r, err := cli.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
