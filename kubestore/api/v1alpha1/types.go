package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits of the schema. The API server rejects objects outside them.
const (
	// MinLeaseDurationSeconds is the shortest lease: one second.
	MinLeaseDurationSeconds = 1
	// MaxLeaseDurationSeconds is the longest lease: one day. A longer
	// lease means a dead holder blocks the lock for longer than anyone
	// would wait; it is almost certainly a unit mistake.
	MaxLeaseDurationSeconds = 86400
	// ProtocolVersion is the record format that this package describes
	// and that baton's kube backend writes (see DistributedLockStatus).
	ProtocolVersion = 1
	// ProtocolVersionPendingToken marks an object as baton creates it:
	// its creator's token is the resourceVersion the API server gave the
	// object, not yet written as a number; status.token and the creator's
	// entry hold the placeholder 1, and the annotation baton.dev/token is
	// "resourceVersion". The first write of the object by a client that
	// knows this (the creator's renewal or release, another acquisition)
	// writes the numbers, removes the annotation and sets
	// ProtocolVersion. Clients that do not know it refuse to write such
	// an object instead of issuing token 2 after it. Future formats
	// (waiters, read/write modes) take versions above 2.
	ProtocolVersionPendingToken = 2
)

// DistributedLock is a named lock of one namespace: one holder at a time,
// with fencing tokens and an expiry. baton's kube backend
// (kubestore.NewDistributedLock) keeps it; people read it with kubectl:
//
//	$ kubectl get distributedlocks
//	NAME      HOLDER          TOKEN   RENEWED                AGE
//	nightly   pod-a-7f3c2e9   42      2026-11-30T06:12:04Z   3d
//
// # Record format and guarantees
//
// Everything, spec and status, lives in the main resource: there is no
// status subresource, so that each acquire, renew and release is one
// update conditional on metadata.resourceVersion (a status subresource
// would split a record change over two writes, or leave spec writes
// without the holder check). Clients must never write it without that
// precondition.
//
// status.token is the last fencing token issued for the lock; every
// acquisition takes status.token+1, stores it in its holder entry and in
// status.token, in the same conditional write, so tokens strictly increase
// across all holders, releases and expiries. The acquisition that creates
// the object takes the resourceVersion the API server gives it (see
// ProtocolVersionPendingToken), which is larger than every token issued on
// an earlier object of the same name, so deleting the object never makes
// tokens repeat. Release removes the holder's
// entry and keeps status.token. Tokens are unsigned 64-bit numbers in
// baton's API; the object stores them as int64 (JSON integers, so kubectl
// and printer columns show plain numbers); baton refuses to issue a token
// past math.MaxInt64, which at one acquisition per millisecond is 292
// million years away.
//
// Expiry is never judged by comparing renewTime with a clock: a holder
// entry counts as expired only when an observer has seen that entry
// (identity, nonce, renewTime, leaseDurationSeconds) unchanged for its
// leaseDurationSeconds on its own monotonic clock. renewTime is written
// from the holder's wall clock, strictly increasing per entry, and serves
// only as the entry's change marker and for people.
//
// # What can follow: FIFO waiting and read/write locks
//
// The type is laid out so that both extend it without changing what
// existing fields mean:
//
//   - FIFO waiting: a status.waiters list of entries {identity, nonce,
//     mode, enqueueTime, renewTime}, appended to (conditionally, like
//     everything else) by a contender that finds the lock full. A
//     contender may then acquire only if no live waiter is ahead of it;
//     the head of the queue moves itself from waiters to holders. Waiters
//     keep their entries alive by bumping renewTime, and an abandoned
//     waiter entry expires by the same per-entry local observation as a
//     holder entry, so a crashed waiter cannot block the queue forever.
//   - Read/write locks: a mode per holder entry (and per waiter): "Write"
//     (exclusive: the only holder) or "Read" (shared with other readers,
//     at most spec.capacity of them; readers take no fencing token of
//     their own). An absent mode means what it means today: the one
//     holder.
//
// Both change what a correct writer must do, so a client that does not
// know them must not write such an object: an Update from a client whose
// Go type lacks status.waiters would silently drop the waiters. Writers of
// those features therefore set status.protocolVersion above 1, and
// clients of this version refuse to write an object whose
// status.protocolVersion is larger than ProtocolVersion (they report it as
// a corrupt record instead of destroying it).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=dlock;dlocks,categories=baton
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holders[0].identity`,description="The first (longest-standing) holder"
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.token`,description="The last fencing token issued"
// +kubebuilder:printcolumn:name="Renewed",type=date,JSONPath=`.status.holders[0].renewTime`,description="When the first holder last renewed (its own wall clock)"
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.spec.capacity`,priority=1
// +kubebuilder:printcolumn:name="Application",type=string,JSONPath=`.spec.application`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DistributedLock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec DistributedLockSpec `json:"spec"`
	// +optional
	Status DistributedLockStatus `json:"status,omitempty"`
}

// DistributedLockSpec is the lock's configuration. baton writes it when it
// creates the object; an administrator may create the object beforehand
// (for example to set the application) or edit it.
type DistributedLockSpec struct {
	// LeaseDurationSeconds is the lease duration of the most recent
	// acquisition or renewal, as on a coordination.k8s.io Lease. Each
	// holder entry records the duration its holder asked for, which is
	// what decides that entry's expiry.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`

	// Capacity is how many holders may hold the lock at once. It must be
	// 1: baton's first versions made a counting semaphore of one object
	// with a larger capacity, whose holders shared one token counter and
	// so could not be fenced; baton now refuses to acquire such an object
	// (a semaphore is baton.Semaphore: one object per slot), while the
	// holders it still has renew and release their entries. Setting it to 1
	// takes nothing away from them; new acquisitions wait until none is
	// left.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	Capacity int32 `json:"capacity,omitempty"`

	// Application names the application that owns this lock name (kube's
	// WithApplication). A baton store of another application refuses the
	// lock instead of blocking on it.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Application string `json:"application,omitempty"`
}

// DistributedLockStatus is the lock's state. It is written by lock clients
// (not by a controller), always with a conditional update of the whole
// object.
type DistributedLockStatus struct {
	// Token is the last fencing token issued for the lock (0: none yet,
	// on an object an administrator created; its first acquisition takes
	// the object's resourceVersion). It only ever grows, by one per
	// acquisition after the first. See ProtocolVersionPendingToken for
	// the placeholder of a newly created object.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Token int64 `json:"token,omitempty"`

	// Transitions counts acquisitions after the first, as a Lease's
	// leaseTransitions does.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Transitions int32 `json:"transitions,omitempty"`

	// Holders are the current claims, oldest first. An entry whose holder
	// stopped renewing stays until a writer that judged it expired removes
	// it; readers must judge expiry themselves (see DistributedLock).
	// +listType=map
	// +listMapKey=nonce
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	Holders []Holder `json:"holders,omitempty"`

	// ProtocolVersion is the record format of the object; absent means 1.
	// Clients refuse to write objects of a newer format than they know.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ProtocolVersion int32 `json:"protocolVersion,omitempty"`
}

// Holder is one claim on the lock.
type Holder struct {
	// Identity is the holder's identity (for example the pod name plus a
	// per-process suffix).
	// +kubebuilder:validation:MinLength=1
	Identity string `json:"identity"`
	// Nonce is random per acquisition; Identity and Nonce together name
	// the owner of the claim, and only that owner renews or releases it.
	// +kubebuilder:validation:MinLength=1
	Nonce string `json:"nonce"`
	// Token is the fencing token of this claim.
	// +kubebuilder:validation:Minimum=1
	Token int64 `json:"token"`
	// LeaseDurationSeconds is how long the claim lasts after each write of
	// it, as judged by every observer on its own clock.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`
	// AcquireTime is the holder's wall clock at the acquisition; for
	// people only.
	// +optional
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`
	// RenewTime is the holder's wall clock at its last acquire or renew,
	// strictly increasing per entry. It is never compared with another
	// clock; it marks the entry as changed, and people read it.
	// +optional
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`
}

// DistributedLockList is a list of DistributedLocks.
//
// +kubebuilder:object:root=true
type DistributedLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DistributedLock `json:"items"`
}
