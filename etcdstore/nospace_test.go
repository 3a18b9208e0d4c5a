package etcdstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// A member whose database reached its quota raises the NOSPACE alarm and
// refuses writes until an operator clears it: an acquisition then fails
// with an error matching ErrUnavailable that says so, while a claim taken
// before keeps renewing (a lease keepalive is not a write).
func TestNoSpace(t *testing.T) {
	srv := startEtcd(t, testenv.EtcdArgs("--quota-backend-bytes", "1048576"))
	c := connect(t, srv.Endpoints()...)
	s := newStore(t, c, etcdstore.WithPrefix(freshPrefix(t)))
	const ttl = 3 * time.Second // renewals every second: room for a loaded machine
	held := lock(t, newMutex(t, s, "held", "a", ttl))

	value := strings.Repeat("x", 60<<10)
	for i := 0; ; i++ {
		_, err := c.Put(t.Context(), fmt.Sprintf("/filler/%d", i), value)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			break
		}
		// etcd measures its database at each backend commit (every
		// 100ms), so the puts that pass the quota depend on the machine's
		// speed: 100 to 118 of these (6 MiB or more) on an idle one, more
		// on a busy one. The bound only keeps a member that never raises
		// the alarm from looping.
		if err != nil || i == 1000 {
			t.Fatalf("filling the database: put %d: %v (no NOSPACE after 60 MiB with a quota of 1 MiB)", i, err)
		}
	}
	_, err := s.TryAcquire(t.Context(), "other", backend.Request{Holder: "b", Nonce: "n", TTL: ttl})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "etcdctl alarm disarm") {
		t.Errorf("TryAcquire with NOSPACE raised: %v; want ErrUnavailable naming the alarm", err)
	}
	// Past the TTL, the claim taken before the alarm is still held.
	select {
	case <-held.Done():
		t.Fatalf("the lease taken before the alarm ended: %v", held.Err())
	case <-time.After(ttl + ttl/2):
	}
}
