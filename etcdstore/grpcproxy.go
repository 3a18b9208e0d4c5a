package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// An etcd grpc-proxy (etcd grpc-proxy start) in front of a cluster
// answers MemberList itself, with its own --advertise-client-url as the
// only member and no response header, whatever the state of the members
// behind it; a member always sends a header. A proxy started with an
// empty --advertise-client-url forwards MemberList, and cannot be told
// from a member this way.
//
// A Store's lease timing does not hold through a proxy: the proxy answers
// a lease keepalive with the answer to a keepalive of its own, which it
// sends on its own schedule (every third of the lease's TTL) and which
// etcd may have handled before the client's request left. See "etcd
// grpc-proxy" in the package documentation.

// proxyAnswered reports whether a MemberList answer came from an etcd
// grpc-proxy rather than a member.
func proxyAnswered(r *clientv3.MemberListResponse) bool { return r.Header == nil }

// IsGRPCProxy asks endpoint, over a connection of its own made with
// client's credentials, whether it is an etcd grpc-proxy rather than a
// member (see "etcd grpc-proxy" in the package documentation for what
// that costs a lock). It needs no permission on any key.
func IsGRPCProxy(ctx context.Context, client *clientv3.Client, endpoint string) (bool, error) {
	conn, err := client.Dial(endpoint)
	if err != nil {
		return false, fmt.Errorf("etcdstore: dialling %s: %w", redactEndpoint(endpoint), err)
	}
	defer conn.Close()
	r, err := pb.NewClusterClient(conn).MemberList(ctx, &pb.MemberListRequest{})
	if err != nil {
		return false, fmt.Errorf("etcdstore: asking %s for its members: %w", redactEndpoint(endpoint), mapErr(err))
	}
	return proxyAnswered((*clientv3.MemberListResponse)(r)), nil
}

// clusterBehindProxy checks that the cluster behind the etcd grpc-proxy
// that cfg's endpoints reach answers, with a raft leader: the proxy
// forwards Status to a member. It returns an error matching
// backend.ErrUnavailable if no endpoint's member answers within wait with
// a leader. It asks through a client of its own that sends each request
// once: the proxy refuses at once while it cannot reach a member, and
// etcd's client would send Status again every 25ms until wait ends,
// logging each refusal.
func clusterBehindProxy(ctx context.Context, cfg Config, wait time.Duration) error {
	cc, err := cfg.ClientConfig()
	if err != nil {
		return err
	}
	cc.Logger, cc.MaxUnaryRetries = zap.NewNop(), 1
	probe, err := clientv3.New(cc)
	if err != nil {
		return fmt.Errorf("%w: an etcd grpc-proxy answered, but: %w", backend.ErrUnavailable, mapErr(err))
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sts := make([]*clientv3.StatusResponse, len(cfg.Endpoints))
	errs := make([]error, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Go(func() { sts[i], errs[i] = probe.Status(ctx, ep) })
	}
	wg.Wait()
	for _, st := range sts {
		if st != nil && st.Leader != 0 {
			return nil
		}
	}
	if lost := leaderless(cfg.Endpoints, sts); lost != nil {
		return fmt.Errorf("%w: an etcd grpc-proxy answered, and %w", backend.ErrUnavailable, lost)
	}
	return fmt.Errorf("%w: an etcd grpc-proxy answered, but no member of the cluster behind it did (%v): start the members, or check the proxy's --endpoints, its network path to them, and its --cacert, --cert and --key if they serve TLS",
		backend.ErrUnavailable, firstErr(errs))
}

// firstErr returns the first error of errs that is not nil, or nil.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
