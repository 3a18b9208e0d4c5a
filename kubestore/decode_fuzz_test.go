package kubestore

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sameFields reports whether a and b hold the same record, times aside
// (they are for people only, and one outside what RFC 3339 can write
// reads back as unset) and FinalizerClaim aside (a write puts it on a held
// object whatever the object had).
func sameFields(a, b object) bool {
	a.raw, b.raw, a.rv, b.rv = nil, nil, "", ""
	a.claimed, b.claimed = false, false
	a.acquire, a.renew, b.acquire, b.renew = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a == b
}

// checkRoundTrip checks a decoder's result: an error must match
// backend.ErrCorruptRecord; a record must come back from rewrite (encode,
// then decode) with the same fields.
func checkRoundTrip(t *testing.T, o object, err error, rewrite func(object) (object, error)) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, backend.ErrCorruptRecord) {
			t.Errorf("decode error %v does not match ErrCorruptRecord", err)
		}
		return
	}
	again, err := rewrite(o)
	if err != nil {
		t.Fatalf("a decoded record %+v does not decode after encoding: %v", o, err)
	}
	if !sameFields(o, again) {
		t.Errorf("round trip changed the record:\n got %+v\nwant %+v", again, o)
	}
}

// FuzzDecodeConfigMap: any annotations decode to a record or an error
// matching backend.ErrCorruptRecord, never a panic; a record that decodes
// is written back (encodeConfigMap) with the same fields.
func FuzzDecodeConfigMap(f *testing.F) {
	f.Add("42", "pod-a", "n0", "15", "3", "2026-11-30T12:00:00.123456789Z", "2026-11-30T12:00:05Z", "billing")
	f.Add("1", "", "", "", "", "", "", "")
	f.Add("18446744073709551615", "h", "n", "2147483647", "2147483647", "x", "9999-12-31T23:59:59-23:59", "")
	f.Add("-1", "h", "n", "-5", "1e3", "", "", "")
	f.Fuzz(func(t *testing.T, token, holder, nonce, duration, transitions, acquire, renew, app string) {
		a := map[string]string{AnnotationToken: token, AnnotationHolder: holder, AnnotationNonce: nonce,
			AnnotationDuration: duration, AnnotationTransitions: transitions,
			AnnotationAcquireTime: acquire, AnnotationRenewTime: renew}
		for k, v := range a {
			if v == "" && k != AnnotationToken {
				delete(a, k)
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "7",
			Annotations: a, Labels: map[string]string{LabelApplication: app}}}
		o, err := decodeConfigMap(cm)
		checkRoundTrip(t, o, err, func(o object) (object, error) { return decodeConfigMap(encodeConfigMap(o)) })
	})
}

// FuzzDecodeLease: the same for a Lease, whose token and nonce are
// annotations and the rest typed spec fields.
func FuzzDecodeLease(f *testing.F) {
	f.Add("42", "n0", "pod-a", true, int32(15), int32(3))
	f.Add("x", "", "", false, int32(0), int32(0))
	f.Add("7", "n", "h", true, int32(-1), int32(-1))
	f.Fuzz(func(t *testing.T, token, nonce, holder string, held bool, duration, transitions int32) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "7",
			Annotations: map[string]string{AnnotationToken: token, AnnotationNonce: nonce}}}
		if held {
			l.Spec.HolderIdentity = &holder
		}
		l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = &duration, &transitions
		o, err := decodeLease(l)
		checkRoundTrip(t, o, err, func(o object) (object, error) { return decodeLease(encodeLease(o)) })
	})
}
