package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/baton-go/baton/kubestore"
)

// leaderLabel puts --leader-label on this replica's Pod while it leads
// (see kubestore.LeaderLabel). Failures are logged, not fatal: the lock, not
// the label, decides who leads.
type leaderLabel struct {
	l   *kubestore.LeaderLabel
	log *slog.Logger
}

// labelTimeout bounds each labelling request.
const labelTimeout = 5 * time.Second

// newLeaderLabel returns nil if label is empty.
func (f *lockFlags) newLeaderLabel(label string, log *slog.Logger) (*leaderLabel, error) {
	if label == "" {
		return nil, nil
	}
	cfg, ns, err := f.kube.restConfig()
	if err != nil {
		return nil, err
	}
	pod, err := kubestore.PodName()
	if err != nil {
		return nil, err
	}
	l, err := kubestore.NewLeaderLabel(cfg, ns, pod, label, kubestore.LeaderOf(f.name))
	if err != nil {
		return nil, err
	}
	log.Info("labelling this Pod while it leads", "label", label, "pod", ns+"/"+pod)
	return &leaderLabel{l: l, log: log}, nil
}

// lead labels this Pod (and unlabels any other); ctx is the term's.
func (p *leaderLabel) lead(ctx context.Context) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	if err := p.l.Lead(ctx); err != nil {
		p.log.Warn("cannot label this Pod as the leader", "err", err)
	}
}

// unlead removes the label, before the lock is released.
func (p *leaderLabel) unlead() {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), labelTimeout)
	defer cancel()
	if err := p.l.Unlead(ctx); err != nil {
		p.log.Warn("cannot remove the leader label from this Pod; the next leader removes it", "err", err)
	}
}
