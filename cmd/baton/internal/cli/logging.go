package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// timeFormat is the time of a text log line: date, milliseconds and zone.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// newHandler returns the log handler of --log-format on w at level.
func newHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(format) {
	case "text":
		opts.ReplaceAttr = func(groups []string, at slog.Attr) slog.Attr {
			if len(groups) == 0 && at.Key == slog.TimeKey && at.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, at.Value.Time().Format(timeFormat))
			}
			return at
		}
		return slog.NewTextHandler(w, opts), nil
	case "json":
		// Times in RFC 3339, with zone; durations as in text lines
		// ("2.992s"), not as a count of nanoseconds under a key that
		// names no unit.
		opts.ReplaceAttr = func(_ []string, at slog.Attr) slog.Attr {
			if at.Value.Kind() == slog.KindDuration {
				return slog.String(at.Key, at.Value.Duration().String())
			}
			return at
		}
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, usageErrorf("invalid --log-format %q (want text or json)", format)
}

// libraryLogs routes the logs of the libraries under the CLI into the
// handler of the running command. go-redis and klog (client-go) log
// through process-wide loggers, so this is the CLI's one package-level
// variable: a baton process runs one command; tests that run several in
// one process see the libraries' lines in the latest one's output.
var libraryLogs = &libraryRoute{}

type libraryRoute struct {
	once   sync.Once
	mu     sync.Mutex
	target *slog.Logger
}

// use makes l the target of the libraries' logs, installing the routes
// into go-redis and klog the first time.
func (r *libraryRoute) use(l *slog.Logger) {
	r.mu.Lock()
	r.target = l
	r.mu.Unlock()
	r.once.Do(func() {
		redis.SetLogger(redisLogger{r})
		klog.SetSlogLogger(slog.New(routeHandler{r: r}).With("source", "client-go"))
	})
}

func (r *libraryRoute) logger() *slog.Logger {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.target
}

// routeHandler forwards records to the route's current target.
type routeHandler struct {
	r     *libraryRoute
	attrs []slog.Attr
	group string
}

func (h routeHandler) Enabled(ctx context.Context, level slog.Level) bool {
	l := h.r.logger()
	return l != nil && l.Enabled(ctx, level)
}

func (h routeHandler) Handle(ctx context.Context, rec slog.Record) error {
	l := h.r.logger()
	if l == nil {
		return nil
	}
	hd := l.Handler().WithAttrs(h.attrs)
	if h.group != "" {
		hd = hd.WithGroup(h.group)
	}
	return hd.Handle(ctx, rec)
}

func (h routeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return h
}

func (h routeHandler) WithGroup(name string) slog.Handler {
	h.group = name
	return h
}

// redisLogger takes go-redis's lines (dial failures, pool notices) at the
// debug level: baton reports the errors that matter itself.
type redisLogger struct{ r *libraryRoute }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if t := l.r.logger(); t != nil {
		t.DebugContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "source", "go-redis")
	}
}

// zapLogger returns a zap logger (for the etcd client) that writes into l
// with the source "etcd-client", its levels mapped onto slog's (see
// slogLevel).
func zapLogger(l *slog.Logger) *zap.Logger {
	return zap.New(zapCore{l: l.With("source", "etcd-client")})
}

type zapCore struct {
	l *slog.Logger
}

// slogLevel maps the etcd client's levels one step down: it warns of
// every retried request during a leader change, which baton itself
// reports when it matters (a failed renew, a lost lock).
func slogLevel(lvl zapcore.Level) slog.Level {
	switch {
	case lvl <= zapcore.InfoLevel:
		return slog.LevelDebug
	case lvl == zapcore.WarnLevel:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

func (c zapCore) Enabled(lvl zapcore.Level) bool {
	return c.l.Enabled(context.Background(), slogLevel(lvl))
}

func (c zapCore) With(fields []zapcore.Field) zapcore.Core {
	return zapCore{l: c.l.With(zapAttrs(fields)...)}
}

func (c zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	c.l.Log(context.Background(), slogLevel(e.Level), e.Message, zapAttrs(fields)...)
	return nil
}

func (zapCore) Sync() error { return nil }

// zapAttrs turns zap fields into slog key-value pairs.
func zapAttrs(fields []zapcore.Field) []any {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	return attrs
}
