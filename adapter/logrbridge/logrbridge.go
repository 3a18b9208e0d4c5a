// Package logrbridge sends baton's log lines to a logr.Logger, the logging
// interface of controller-runtime, client-go (klog) and many Kubernetes
// programs.
//
// baton logs through log/slog (baton.WithLogger, and the WithLogger
// options of its stores and adapters). Logger turns a logr.Logger into a
// *slog.Logger for them; in a controller-runtime program:
//
//	log := logrbridge.Logger(ctrl.Log.WithName("baton"))
//	el, err := baton.NewElector(store, "my-operator", baton.WithLogger(log))
//
// ctrl.Log is controller-runtime's delegating logger: lines logged before
// ctrl.SetLogger is called go to the logger set later.
//
// # Levels
//
// logr has verbosity levels and errors, slog has levels. slog's Info
// becomes logr's V(0), Debug becomes V(4) (shown only by loggers with a
// verbosity of 4 or more), and Error becomes an error entry. logr has no
// warning level, so slog's Warn is logged at V(0) like Info; Logger adds
// the attribute slog_level="WARN" to those lines so that baton's warnings
// ("lock lost", "renew failed; retrying") can still be told apart and
// searched for.
package logrbridge

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
)

// Logger returns a *slog.Logger that writes to l, with the level mapping
// described in the package documentation.
func Logger(l logr.Logger) *slog.Logger {
	return slog.New(warnHandler{logr.ToSlogHandler(l)})
}

// warnHandler marks records between Warn and Error, which logr would log
// as plain V(0) info lines.
type warnHandler struct{ slog.Handler }

func (h warnHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && r.Level < slog.LevelError {
		r = r.Clone()
		r.AddAttrs(slog.String("slog_level", r.Level.String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h warnHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnHandler{h.Handler.WithAttrs(attrs)}
}

func (h warnHandler) WithGroup(name string) slog.Handler {
	return warnHandler{h.Handler.WithGroup(name)}
}
