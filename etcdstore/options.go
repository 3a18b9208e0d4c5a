package etcdstore

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/baton-go/baton/backend"
)

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
const DefaultPrefix = "/baton/locks/"

// Option configures New.
type Option func(*options)

type options struct {
	prefix string
	fair   bool
	logger *slog.Logger
}

func newOptions(opts []Option) options {
	o := options{prefix: DefaultPrefix, fair: true}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return o
}

func (o options) validate() error {
	switch {
	case o.prefix == "":
		return fmt.Errorf("%w: the key prefix is empty", backend.ErrInvalidOptions)
	case !strings.HasSuffix(o.prefix, "/"):
		return fmt.Errorf("%w: the key prefix %q must end with '/', as in %q", backend.ErrInvalidOptions, o.prefix, DefaultPrefix)
	case strings.ContainsAny(o.prefix, "\x00"):
		return fmt.Errorf("%w: the key prefix %q contains a NUL byte", backend.ErrInvalidOptions, o.prefix)
	}
	return nil
}

// WithPrefix sets the prefix of every key the Store reads or writes
// (default "/baton/locks/"). It must end with '/'. Applications that must
// not share locks use different prefixes; a prefix must not be another
// Store's prefix plus a lock name, or List would mix their records.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithFair chooses between fair mode (true, the default) and plain mode
// (false). In fair mode a contender that finds the lock held while it
// waits in baton.Mutex.Lock (or an Elector campaign) takes a place in a
// queue ordered by etcd's create revision, and the lock passes to waiters
// strictly in arrival order, each woken only by the departure of the one
// ahead of it, as with etcd's concurrency.Mutex. In plain mode waiters do
// not queue: every waiter watches the claim and races for it when it is
// released, which saves a check on each uncontended acquire but lets an
// unlucky waiter wait many handovers. See the package documentation,
// "Fair mode", for how this maps onto baton's Backend seam and what it
// costs. All clients of a lock should use the same mode: exclusion and
// fencing hold across modes, but a client in plain mode does not queue
// and can overtake the queue.
func WithFair(fair bool) Option { return func(o *options) { o.fair = fair } }

// WithLogger sets the logger for the Store's background work (keepalive
// stream failures, leases found expired, failed clean-ups). Default
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }
