package batonlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock implements client-go's resourcelock.Interface over a backend.Backend.
// Give it to leaderelection.LeaderElectionConfig.Lock or to
// controller-runtime's manager.Options.LeaderElectionResourceLockInterface.
//
// A Lock belongs to one participant (one identity) of one election: every
// replica builds its own. Its methods are safe for concurrent use; they are
// serialized, as client-go calls them one at a time anyway.
type Lock struct {
	b        backend.Backend
	name     string
	identity string
	log      *slog.Logger

	mu    sync.Mutex
	grant *backend.Grant // the claim this participant holds, as far as it knows
	// renewErr is the error of the last renew of grant if it failed (but
	// did not report the claim lost); nil after a success.
	renewErr error
}

// Option configures a Lock.
type Option func(*Lock)

// WithLogger sets the logger that receives RecordEvent's events ("became
// leader", "stopped leading") and the claims the Lock loses. Default:
// slog.Default(). To log through controller-runtime's logger, pass
// logrbridge.Logger(ctrl.Log.WithName("leader-election")).
func WithLogger(l *slog.Logger) Option { return func(k *Lock) { k.log = l } }

// New returns the Lock of the participant identity in the election name on
// b. The name must be a valid baton lock name (backend.ValidateName) and the
// identity a valid baton identity (non-empty, printable, no spaces, at most
// baton.MaxIdentityLength bytes); errors match backend.ErrInvalidName or
// backend.ErrInvalidOptions. The identity must differ between replicas:
// controller-runtime's default (host name plus a UUID) is a good one, and so
// is baton.DefaultIdentity().
func New(b backend.Backend, name, identity string, opts ...Option) (*Lock, error) {
	if rv := reflect.ValueOf(b); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, fmt.Errorf("batonlock: %w: backend is a nil %T (check the error of its constructor)", backend.ErrInvalidOptions, b)
	}
	// baton.NewMutex performs exactly the name and identity validation the
	// engine applies; the Mutex itself is not used.
	if _, err := baton.NewMutex(b, name, baton.WithIdentity(identity)); err != nil {
		return nil, fmt.Errorf("batonlock: %w", err)
	}
	k := &Lock{b: b, name: name, identity: identity}
	for _, o := range opts {
		if o != nil {
			o(k)
		}
	}
	if k.log == nil {
		k.log = slog.Default()
	}
	return k, nil
}

// Identity implements resourcelock.Interface.
func (k *Lock) Identity() string { return k.identity }

// Describe implements resourcelock.Interface: the lock name and the
// backend's type, for client-go's log lines.
func (k *Lock) Describe() string { return fmt.Sprintf("%s (baton %T)", k.name, k.b) }

// RecordEvent implements resourcelock.Interface by logging the event at
// Info level with the lock name, the identity and the current token.
func (k *Lock) RecordEvent(event string) {
	token, held := k.Token()
	k.log.Info("batonlock: "+event, "lock", k.name, "identity", k.identity, "token", token, "held", held)
}

// Token returns the fencing token of the claim this participant holds, and
// false if it holds none (as far as it knows: a claim the store has taken
// away is noticed at the next renew). client-go's API has no place for the
// token; a leader-election runnable that writes to a fenced resource reads
// it here, once leadership started, and sends it with every write.
//
// The token can change within what client-go considers one term: if a
// renew finds the claim lost but the lock free, client-go's next update
// acquires it again, with a new, larger token. Read it for every write,
// not once per term.
func (k *Lock) Token() (uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.grant == nil {
		return 0, false
	}
	return k.grant.Token, true
}

// rawRecord is what Get returns as the raw record. client-go compares raw
// records to notice changes: any write by the holder (a renew) must change
// it. It is never parsed back.
type rawRecord struct {
	resourcelock.LeaderElectionRecord
	Token   uint64 `json:"token"`
	Nonce   string `json:"nonce,omitempty"`
	Version string `json:"version,omitempty"`
	Held    bool   `json:"held"`
}

// Get implements resourcelock.Interface. It reads the lock's record from
// the backend. HolderIdentity is the holder only while the backend judges
// the claim valid (backend.Record.Held); an expired or released claim shows
// an empty holder, so client-go does not add its own expiry wait to the
// backend's and goes straight to Update, where the backend decides
// atomically. A valid claim under this Lock's identity that this Lock does
// not hold (another nonce) is shown with the nonce appended, so that
// client-go does not take it for its own. If the backend has no record for the lock, the error matches
// both backend.ErrNotFound and apierrors.IsNotFound (client-go then calls
// Create).
func (k *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.grant != nil && k.renewErr != nil {
		// A leader whose renewals fail only needs to renew again, which
		// client-go does without a Get. But client-go's release on
		// cancel starts with a Get, and runs before it reports the loss:
		// against an unreachable store that Get would hold the leader's
		// runnables for up to another RenewDeadline, past the moment its
		// claim can expire. Fail it at once. (%v, not %w: the renew
		// error must not look like a NotFound to client-go.)
		return nil, nil, fmt.Errorf("batonlock: get %q: not read while this replica's renewals fail (last error: %v)", k.name, k.renewErr)
	}
	rec, err := k.b.Get(ctx, k.name)
	if errors.Is(err, backend.ErrNotFound) {
		// A Kubernetes-style NotFound too, so that client-go's
		// apierrors.IsNotFound recognizes it and calls Create.
		notFound := apierrors.NewNotFound(schema.GroupResource{Group: "baton.dev", Resource: "locks"}, k.name)
		return nil, nil, fmt.Errorf("batonlock: get %q: %w (%w)", k.name, notFound, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("batonlock: get %q: %w", k.name, err)
	}
	ler := resourcelock.LeaderElectionRecord{
		LeaseDurationSeconds: int(math.Ceil(rec.TTL.Seconds())),
		AcquireTime:          metav1.NewTime(rec.AcquireTime),
		RenewTime:            metav1.NewTime(rec.RenewTime),
		LeaderTransitions:    int(min(rec.Transitions, math.MaxInt32)),
	}
	if rec.Held() {
		ler.HolderIdentity = rec.Holder
		if rec.Holder == k.identity && (k.grant == nil || k.grant.Nonce != rec.Nonce) {
			// This identity's name on a claim this Lock does not hold: an
			// acquisition whose reply was lost, or another process
			// misconfigured with the same identity. Shown as someone
			// else's, so that client-go waits as a standby instead of
			// believing it leads (IsLeader, OnNewLeader).
			ler.HolderIdentity = fmt.Sprintf("%s (another acquisition, nonce %s)", rec.Holder, rec.Nonce)
		}
	}
	raw, err := json.Marshal(rawRecord{LeaderElectionRecord: ler, Token: rec.Token, Nonce: rec.Nonce, Version: rec.Version, Held: rec.Held()})
	if err != nil {
		return nil, nil, fmt.Errorf("batonlock: get %q: encoding the record: %w", k.name, err)
	}
	return &ler, raw, nil
}

// Create implements resourcelock.Interface. client-go calls it when Get
// found no record; it acquires the lock like Update (the backend creates
// the record atomically, or reports the lock held if another participant
// created it first).
func (k *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != k.identity {
		return fmt.Errorf("batonlock: create %q: %w: the record names %q, this lock acts for %q only",
			k.name, backend.ErrInvalidOptions, ler.HolderIdentity, k.identity)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.grant != nil {
		return k.renew(ctx, "create")
	}
	return k.acquire(ctx, "create", ler)
}

// Update implements resourcelock.Interface as a conditional operation on
// the backend, never as a write of ler:
//
//   - ler names this participant and it holds a claim: Backend.Renew, which
//     succeeds only if the claim is still this participant's (holder and
//     nonce). An error matching backend.ErrLost forgets the claim.
//   - ler names this participant and it holds none: Backend.TryAcquire,
//     which takes the lock only if it is free or its claim has expired as
//     the backend judges it; otherwise the error matches backend.ErrHeld.
//   - ler names nobody (client-go releasing on cancel): Backend.Release of
//     the claim held, which frees the lock only if it is still this
//     participant's. Without a claim, or if the claim is already lost,
//     there is nothing to release and Update returns nil.
//   - ler names another participant: refused (client-go never does this).
//
// The TTL of an acquisition is ler.LeaseDurationSeconds, client-go's
// LeaseDuration in whole seconds. The other fields of ler (times,
// transitions) are client-go's bookkeeping; the backend keeps its own.
func (k *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch ler.HolderIdentity {
	case "":
		return k.release(ctx)
	case k.identity:
		if k.grant != nil {
			return k.renew(ctx, "update")
		}
		return k.acquire(ctx, "update", ler)
	default:
		return fmt.Errorf("batonlock: update %q: %w: the record names %q, this lock acts for %q only",
			k.name, backend.ErrInvalidOptions, ler.HolderIdentity, k.identity)
	}
}

// acquire takes the lock with a new nonce. k.mu is held.
func (k *Lock) acquire(ctx context.Context, op string, ler resourcelock.LeaderElectionRecord) error {
	ttl := time.Duration(ler.LeaseDurationSeconds) * time.Second
	if ttl < baton.MinTTL {
		return fmt.Errorf("batonlock: %s %q: %w: lease duration %ds is shorter than %v",
			op, k.name, backend.ErrInvalidOptions, ler.LeaseDurationSeconds, baton.MinTTL)
	}
	// Waiting is false: client-go retries every RetryPeriod, but a store
	// that queues waiters (Redis, etcd in fair mode) would hold a place in
	// line for a participant that may never come back.
	req := backend.Request{Holder: k.identity, Nonce: baton.NewNonce(), TTL: ttl}
	g, err := k.b.TryAcquire(ctx, k.name, req)
	if err != nil {
		return fmt.Errorf("batonlock: %s %q: %w", op, k.name, err)
	}
	if g.Holder != req.Holder || g.Nonce != req.Nonce || g.Key != k.name {
		return fmt.Errorf("batonlock: %s %q: the backend returned a grant for %q/%q on %q, asked for %q/%q",
			op, k.name, g.Holder, g.Nonce, g.Key, req.Holder, req.Nonce)
	}
	k.grant, k.renewErr = &g, nil
	return nil
}

// renew extends the claim held. k.mu is held.
func (k *Lock) renew(ctx context.Context, op string) error {
	g, err := k.b.Renew(ctx, *k.grant)
	if errors.Is(err, backend.ErrLost) {
		lost := *k.grant
		k.grant, k.renewErr = nil, nil
		k.log.Warn("batonlock: claim lost", "lock", k.name, "identity", k.identity, "token", lost.Token, "err", err)
	} else if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		// A renew cut short because client-go is stopping (its context
		// was cancelled, not timed out) says nothing about the store:
		// let the release that follows read and release.
		k.renewErr = err
	}
	if err != nil {
		return fmt.Errorf("batonlock: %s %q: renew: %w", op, k.name, err)
	}
	k.renewErr = nil
	// Keep the nonce and token of the grant held; take the backend's
	// version for its next conditional write.
	k.grant.Version = g.Version
	return nil
}

// release frees the claim held, if any. k.mu is held.
func (k *Lock) release(ctx context.Context) error {
	if k.grant == nil {
		return nil
	}
	err := k.b.Release(ctx, *k.grant)
	if err == nil || errors.Is(err, backend.ErrLost) {
		// Released, or no longer ours: either way this participant holds
		// nothing now.
		k.grant, k.renewErr = nil, nil
		return nil
	}
	return fmt.Errorf("batonlock: release %q: %w", k.name, err)
}
