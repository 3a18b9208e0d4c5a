package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/storeerr"
)

// etcdCheckTimeout bounds the questions doctor asks one etcd endpoint.
const etcdCheckTimeout = 5 * time.Second

// etcdChecks asks each endpoint for its status (clientv3 Status): one row
// per endpoint, with the server's version, and whether any endpoint
// answered with a raft leader (only such a member serves locks). An
// endpoint that does not answer, or answers without a leader, fails if
// none serves, and warns otherwise (the others serve the lock); one that
// reports an alarm that stops the lock fails.
func etcdChecks(ctx context.Context, f *etcdFlags) (rows []check, answered bool) {
	cfg := f.config()
	cc, err := cfg.ClientConfig()
	if err != nil {
		return []check{{"etcd", resultFail, err.Error(), "check --endpoints, --cacert, --cert, --key, --user and --password"}}, false
	}
	client, err := clientv3.New(cc)
	if err != nil {
		return []check{storeFailureNamed("etcd", err)}, false
	}
	defer client.Close()
	// The endpoints are asked at once: a silent one takes etcdCheckTimeout,
	// and doctor should not take that once per endpoint.
	checks := make([]check, len(cfg.Endpoints))
	idle := make([]bool, len(cfg.Endpoints)) // by row: its endpoint did not answer, or has no leader
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Go(func() {
			var ok bool
			checks[i], ok = endpointCheck(ctx, client, cfg, ep)
			idle[i] = !ok
		})
	}
	wg.Wait()
	answered = slices.Contains(idle, false)
	for i := range checks {
		// An alarm an endpoint answered with is the cluster's: the other
		// endpoints do not work around it.
		if checks[i].result == resultFail && idle[i] && answered {
			checks[i].result = resultWarn
			checks[i].fix += "; the lock works meanwhile through the endpoints that answer"
		}
	}
	return checks, answered
}

// endpointCheck is the row of one endpoint: its version and role if it
// answers Status, else why not. It reports whether the endpoint answered
// with a raft leader and as a voting member: a member without a leader
// (its cluster lost its quorum, or it is cut off from the others), and a
// learner, answer no lock request. The row of an etcd grpc-proxy fails
// (grpcProxyCheck), though the proxy serves locks.
func endpointCheck(parent context.Context, client *clientv3.Client, cfg etcdstore.Config, endpoint string) (check, bool) {
	label := "etcd " + endpoint
	ctx, cancel := context.WithTimeout(parent, etcdCheckTimeout)
	defer cancel()
	// gRPC retries a refused connection until the deadline and then
	// reports only the deadline: one connection first (through the
	// environment's proxy, as gRPC's) names the cause.
	if err := etcdstore.Reach(ctx, endpoint); err != nil {
		return storeFailureNamed(label, storeerr.Classify(err)), false
	}
	st, err := client.Status(ctx, endpoint)
	if err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			// No answer in time: one dial of our own says why, such as a
			// TLS handshake that cannot succeed.
			if why := cfg.Diagnose(parent, endpoint); why != nil {
				err = why
			}
		}
		return storeFailureNamed(label, storeerr.Classify(err)), false
	}
	role := "follower"
	if st.Header != nil && st.Leader == st.Header.MemberId {
		role = "leader"
	}
	detail := fmt.Sprintf("etcd %s, %s", st.Version, role)
	if st.IsLearner {
		return check{label, resultFail, fmt.Sprintf("etcd %s, learner (not voting): the member answers no lock request until it is promoted", st.Version),
			"promote it once it has caught up with the leader (etcdctl member promote ID; etcdctl member list shows the ID), or list the cluster's voting members instead"}, false
	}
	if st.Leader == 0 {
		return check{label, resultFail, fmt.Sprintf("etcd %s, no raft leader: the member answers no lock request", st.Version),
			"the member cannot reach a majority of the cluster's members (the cluster lost its quorum, or this member is cut off from the others): start the members that are down, or mend the network between them; etcdctl endpoint status --cluster shows each member's leader"}, false
	}
	if proxy, err := etcdstore.IsGRPCProxy(ctx, client, endpoint); err == nil && proxy {
		return grpcProxyCheck(label, st.Version), true
	}
	if len(st.Errors) > 0 {
		// An alarm stops every lock until an operator clears it.
		result := resultWarn
		if slices.ContainsFunc(st.Errors, stopsLocks) {
			result = resultFail
		}
		return check{label, result, detail + "; the member reports: " + strings.Join(st.Errors, "; "),
			"see etcdctl alarm list and etcdctl endpoint status on that member; a NOSPACE alarm refuses every write until an operator compacts and defragments the database and runs etcdctl alarm disarm"}, true
	}
	return check{label, resultPass, detail, ""}, true
}

// grpcProxyCheck is the failing row of an endpoint that is an etcd
// grpc-proxy in front of a member of etcd version: the proxy answers
// lease keepalives on its own schedule, so a holder cannot bound when etcd
// last extended its lease.
func grpcProxyCheck(label, version string) check {
	return check{label, resultFail,
		fmt.Sprintf("etcd %s behind an etcd grpc-proxy, which baton does not support: the proxy answers a lease keepalive with the answer to one it sent on its own schedule (every third of the lease's TTL), which etcd may have handled before the holder's request left, so a holder cannot bound when its lease was last extended, and renewals stall until the proxy's next keepalive", version),
		"list the cluster's members in --endpoints (the addresses the proxy's own --endpoints gives), or put a TCP load balancer in front of them; services that shared the cluster through proxies of different --namespace values are kept apart by giving each its own --app"}
}

// stopsLocks reports whether an error a member's status lists is an alarm
// that refuses every write (NOSPACE) or every request (CORRUPT).
func stopsLocks(statusErr string) bool {
	return strings.Contains(statusErr, "alarm:NOSPACE") || strings.Contains(statusErr, "alarm:CORRUPT")
}

// etcdPermissionsCheck asks etcd whether the user may read and write what
// the lock name needs under the store's prefix (etcdstore's
// CheckPermissions), unless the store could not be opened or no endpoint
// answered.
func etcdPermissionsCheck(ctx context.Context, st store, name string, answered bool) check {
	const label = "permissions"
	es, ok := st.(*etcdstore.Store)
	if !ok {
		return check{label, resultSkip, "not checked: the store could not be opened (see the store row)", ""}
	}
	if !answered {
		return check{label, resultSkip, "not checked: no endpoint answered (see the etcd rows)", ""}
	}
	ctx, cancel := context.WithTimeout(ctx, etcdCheckTimeout)
	defer cancel()
	if err := es.CheckPermissions(ctx, name); err != nil {
		if errors.Is(err, backend.ErrUnavailable) {
			// An endpoint answered its row: a refusal of writes (an alarm)
			// or a member that went away since, which its row names.
			return check{label, resultSkip, "not checked: " + err.Error(), ""}
		}
		c := storeFailureNamed(label, err)
		if errors.Is(err, backend.ErrForbidden) {
			c.fix = "an administrator grants the user's role read and write permission on the prefix's key range: etcdctl --user root role grant-permission --prefix ROLE readwrite " + es.Prefix()
		}
		return c
	}
	return check{label, resultPass, fmt.Sprintf("this user may read the prefix %q and write the keys of lock %q", es.Prefix(), name), ""}
}

// storeFailureNamed is storeFailure for a row of another name.
func storeFailureNamed(label string, err error) check {
	c := storeFailure(err)
	c.name = label
	return c
}
