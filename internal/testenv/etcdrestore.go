package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// FindEtcdutl returns the path of etcdutl, etcd's offline tool (snapshot
// restore): beside the etcd binary FindEtcd returns (tools/testbin builds
// both), else the first etcdutl on PATH.
func FindEtcdutl() (string, error) {
	etcd, err := FindEtcd()
	if err == nil {
		p := filepath.Join(filepath.Dir(etcd), "etcdutl")
		if isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("etcdutl"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("etcdutl not found beside etcd (%v) nor on PATH; build it with: %s", err, TestbinHint)
}

// RestoreSnapshot replaces the data of a stopped single-member etcd with
// the snapshot at path, as an operator restores etcd: etcdutl snapshot
// restore, with --bump-revision bump and --mark-compacted when bump is
// positive (docs/backends.md says to), so that revisions, and the tokens
// made of them, go on above every one written before. Start then brings
// the member back on the restored data: a new cluster at the same
// endpoint, whose raft terms start again.
func (e *Etcd) RestoreSnapshot(path string, bump int64) error {
	if e.Running() {
		return fmt.Errorf("etcd at %s is running; stop it before restoring a snapshot", e.Addr())
	}
	if e.initialCluster != "" {
		return fmt.Errorf("etcd at %s is a cluster member; RestoreSnapshot restores a single member", e.Addr())
	}
	bin, err := FindEtcdutl()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(e.Dir); err != nil {
		return err
	}
	name := "baton-test"
	args := []string{"snapshot", "restore", path,
		"--data-dir=" + e.Dir,
		"--name=" + name,
		"--initial-cluster=" + name + "=" + e.peerURL(),
		"--initial-advertise-peer-urls=" + e.peerURL(),
	}
	if bump > 0 {
		args = append(args, "--bump-revision="+strconv.FormatInt(bump, 10), "--mark-compacted")
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("etcdutl %v: %w: %s", args, err, lastLines(string(out), 8))
	}
	return nil
}
