package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/kube"
)

// A term of an Elector on the Lease backend leaves StartedLeading, Released
// and StoppedLeading events on the Lease, as kubectl describe shows them.
func TestEventObserverRecordsLeadership(t *testing.T) {
	t.Parallel()
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	obs, err := kube.NewEventObserver(cs, ns, "Lease", "baton", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	el, err := baton.NewElector(newLease(t, cfg, ns), "scheduler", quiet, baton.WithIdentity("pod-a"), baton.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var token uint64
	err = el.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
		token = l.Token()
		cancel() // one short term, then a graceful shutdown (release)
		<-ctx.Done()
		return nil
	})
	if err != context.Canceled {
		t.Fatalf("Run = %v", err)
	}
	if err := obs.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Lease" || e.Source.Component != "baton" {
			t.Errorf("event %s: involved %s, source %q", e.Name, e.InvolvedObject.Kind, e.Source.Component)
		}
		got[e.Reason] = e.Message
	}
	for reason, want := range map[string]string{
		kube.ReasonStartedLeading: fmt.Sprintf("pod-a started leading with fencing token %d", token),
		kube.ReasonReleased:       fmt.Sprintf("pod-a released the lock (token %d)", token),
		kube.ReasonStoppedLeading: fmt.Sprintf("pod-a stopped leading (token %d)", token),
	} {
		if !strings.Contains(got[reason], want) {
			t.Errorf("event %s: message %q, want %q (all: %v)", reason, got[reason], want, got)
		}
	}
}
