package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EtcdCluster is a three-member etcd cluster of processes on loopback, for
// tests of what a raft leader change, a crashed member or a frozen one does
// to clients. Each member is an *Etcd (Members), with that type's Start,
// Stop, Kill, Pause and Resume; a member killed and started again rejoins
// with its data. Members use etcd's default raft timing (heartbeat 100ms,
// election timeout 1s) unless EtcdArgs says otherwise. Every member is
// killed in t.Cleanup.
type EtcdCluster struct {
	t testing.TB
	// Members are the three members, in the order of Endpoints.
	Members []*Etcd
}

// clusterSize is the number of members: the smallest cluster that keeps a
// quorum when one member is lost.
const clusterSize = 3

// StartEtcdCluster starts three etcd members (options as for StartEtcd,
// applied to each; WithEtcdClientCertAuth makes one CA for all) and returns
// once every member reports healthy, so the cluster has a leader. If etcd
// is missing or does not start, the test fails when CI=true and is skipped
// otherwise.
func StartEtcdCluster(t testing.TB, opts ...EtcdOption) *EtcdCluster {
	t.Helper()
	bin, err := FindEtcd()
	if err != nil {
		unavailable(t, "%v", err)
	}
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.autoTLS {
		files, _ := WriteTLSFiles(t)
		cfg.tls = &EtcdTLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile, ClientCertAuth: true}
		cfg.autoTLS = false
	}
	root := t.TempDir()
	c := &EtcdCluster{t: t}
	token := fmt.Sprintf("baton-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range clusterSize {
		m := newEtcd(t, bin, cfg, fmt.Sprintf("member%d", i), filepath.Join(root, fmt.Sprintf("member%d", i)))
		m.cfg.args = append(append([]string(nil), cfg.args...), "--initial-cluster-token="+token)
		c.Members = append(c.Members, m)
		t.Cleanup(m.Kill)
	}
	err = startOnFreePorts(etcdPorts*clusterSize, func(ports []int) error {
		err := c.start(ports)
		if err != nil {
			for _, m := range c.Members {
				m.Kill()
				_ = os.RemoveAll(m.Dir)
			}
		}
		return err
	})
	if err != nil {
		unavailable(t, "cannot start a %d-member etcd cluster with %s: %v (build it with: %s)", clusterSize, bin, err, TestbinHint)
	}
	return c
}

// start gives every member its ports from ports, all distinct, and
// starts them all at once (a member reports healthy only once a quorum
// has elected a leader).
func (c *EtcdCluster) start(ports []int) error {
	for i, m := range c.Members {
		m.setPorts(ports[i*etcdPorts:])
	}
	var peers []string
	for _, m := range c.Members {
		peers = append(peers, m.name+"="+m.peerURL())
	}
	errs := make([]error, len(c.Members))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		m.initialCluster = strings.Join(peers, ",")
		wg.Go(func() {
			if err := m.start(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// AddLearner adds a member to the cluster as a learner, as etcdctl member
// add --learner does (through etcd's JSON gateway on the first member),
// starts it, and returns it once it reports healthy. A learner replicates
// the log but does not vote, and refuses the requests of clients ("rpc not
// supported for learner") but Status and a few others. It is not one of
// Members, and is killed in t.Cleanup.
func (c *EtcdCluster) AddLearner() *Etcd {
	c.t.Helper()
	first := c.Members[0]
	m := newEtcd(c.t, first.bin, first.cfg, fmt.Sprintf("member%d", len(c.Members)), filepath.Join(filepath.Dir(first.Dir), fmt.Sprintf("member%d", len(c.Members))))
	m.joins = true
	c.t.Cleanup(m.Kill)
	ports, err := freePorts(etcdPorts)
	if err != nil {
		c.t.Fatalf("testenv: ports for a learner: %v", err)
	}
	m.setPorts(ports)
	peers := []string{m.name + "=" + m.peerURL()}
	for _, o := range c.Members {
		peers = append(peers, o.name+"="+o.peerURL())
	}
	m.initialCluster = strings.Join(peers, ",")
	if err := first.addMember(m.peerURL(), true); err != nil {
		c.t.Fatalf("testenv: adding a learner: %v", err)
	}
	if err := m.start(); err != nil {
		c.t.Fatalf("testenv: starting the learner: %v", err)
	}
	return m
}

// addMember asks e to add a member at peerURL to its cluster, through
// etcd's JSON gateway. etcd refuses ("unhealthy cluster") until every
// member has been connected for a few seconds; addMember asks again until
// then, for up to 20s.
func (e *Etcd) addMember(peerURL string, learner bool) error {
	body := fmt.Sprintf(`{"peerURLs":[%q],"isLearner":%t}`, peerURL, learner)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: e.ClientTLS()}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Post(e.Endpoint()+"/v3/cluster/member/add", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case !strings.Contains(string(msg), "unhealthy cluster") || time.Now().After(deadline):
			return fmt.Errorf("%s: %s", resp.Status, msg)
		}
		time.Sleep(200 * time.Millisecond) // etcd's health check has no event to wait for
	}
}

// Endpoints returns the members' client URLs, for clientv3.Config.Endpoints.
func (c *EtcdCluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// Addrs returns the members' client addresses (host:port), in the order
// of Members: what a TCP balancer in front of them forwards to.
func (c *EtcdCluster) Addrs() []string {
	addrs := make([]string, len(c.Members))
	for i, m := range c.Members {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Leader returns the index in Members of the member that reports itself raft
// leader (etcd_server_is_leader on its metrics listener), among members that
// run and are not paused, and false if none or more than one does (an old
// leader that was paused may still believe it leads for a moment).
func (c *EtcdCluster) Leader() (int, bool) {
	leader, n := -1, 0
	for i, m := range c.Members {
		if !m.Running() || m.Paused() {
			continue
		}
		if is, err := m.isLeader(); err == nil && is {
			leader, n = i, n+1
		}
	}
	return leader, n == 1
}

// WaitLeader waits until exactly one member other than those in not reports
// itself leader, and returns its index. It fails the test after timeout.
func (c *EtcdCluster) WaitLeader(timeout time.Duration, not ...int) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if i, ok := c.Leader(); ok && !slices.Contains(not, i) {
			return i
		}
		if time.Now().After(deadline) {
			for i, m := range c.Members {
				c.t.Logf("testenv: etcd member %d's last raft log lines: %s", i, raftLines(m.Log(), 8))
				c.t.Logf("testenv: etcd member %d's last warnings and errors from outside rafthttp: %s", i, serverErrorLines(m.Log(), 8))
			}
			c.t.Fatalf("testenv: no etcd leader (other than members %v) within %v; members now: %s", not, timeout, c.describe())
		}
		time.Sleep(50 * time.Millisecond) // polling a process's metrics: there is no event to wait for
	}
}

// describe says, per member, whether it runs, is paused, and what its
// metrics say of leadership (or why they could not be read), for a
// failure message.
func (c *EtcdCluster) describe() string {
	var parts []string
	for i, m := range c.Members {
		st := "running"
		switch {
		case !m.Running():
			st = "not running (killed, stopped or exited)"
		case m.Paused():
			st = "paused"
		}
		is, err := m.isLeader()
		if err != nil {
			parts = append(parts, fmt.Sprintf("%d: %s, metrics unreadable: %v", i, st, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d: %s, leader %t", i, st, is))
	}
	return strings.Join(parts, "; ")
}

// raftLines returns the last n lines of an etcd log that come from raft
// (elections, terms, leader changes), joined for a failure message.
func raftLines(log string, n int) string {
	var raft strings.Builder
	for line := range strings.Lines(log) {
		if strings.Contains(line, `"raft`) || strings.Contains(line, "leader") {
			raft.WriteString(line)
		}
	}
	if raft.Len() == 0 {
		return "(none)"
	}
	return lastLines(raft.String(), n)
}

// serverErrorLines returns the last n lines of an etcd log at level warn or
// above that do not come from rafthttp (whose complaints about a lost peer
// drown the rest), joined for a failure message: why a member stopped.
func serverErrorLines(log string, n int) string {
	var errs strings.Builder
	for line := range strings.Lines(log) {
		if strings.Contains(line, `"caller":"rafthttp/`) {
			continue
		}
		for _, level := range []string{`"level":"warn"`, `"level":"error"`, `"level":"panic"`, `"level":"fatal"`, "panic:"} {
			if strings.Contains(line, level) {
				errs.WriteString(line)
				break
			}
		}
	}
	if errs.Len() == 0 {
		return "(none)"
	}
	return lastLines(errs.String(), n)
}

// isLeader reads etcd_server_is_leader from the member's metrics.
func (e *Etcd) isLeader() (bool, error) { return e.gauge("etcd_server_is_leader") }

// WaitNoLeader waits until e reports that it has no raft leader (its
// etcd_server_has_leader metric is 0: the other members are gone, so a
// leader steps down and a follower stops hearing from one). It fails the
// test after timeout.
func (e *Etcd) WaitNoLeader(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		has, err := e.gauge("etcd_server_has_leader")
		if err == nil && !has {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: etcd %s still reports a leader after %v (%v)", e.Endpoint(), timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a process's metrics: there is no event to wait for
	}
}

// gauge reads the 0-or-1 metric name from e's /metrics.
func (e *Etcd) gauge(name string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	url := "http://127.0.0.1:" + strconv.Itoa(e.MetricsPort) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("no %s in /metrics", name)
}
