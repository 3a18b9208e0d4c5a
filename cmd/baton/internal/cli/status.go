package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/baton-go/baton/backend"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

const statusLong = `Show the state of lock NAME, or of every lock in the store.

The table shows NAME, HOLDER ("<none>" if the lock is free or its claim has
expired), TOKEN (the last fencing token issued), RENEWED (time since the
holder last renewed, by the holder's wall clock; for Redis, the server's;
"in 5m" if that clock is ahead of this machine's; "-" on etcd, whose
renewals write no time),
EXPIRES-IN (how long the claim still lasts as judged from this machine; "-"
if free) and TRANSITIONS (how many times the lock changed hands). -o wide adds TTL, ACQUIRED and the
store's VERSION; -o json and -o yaml print the records (with NAME: one
object; without: {"items": [...]}).

--watch prints again whenever a lock changes hands, is released or expires
(not on every renewal), until interrupted. It reads the locks every second,
and at once when the store's watch (where there is one) reports a change.
Without NAME it watches at most 16 locks (the first by name): thousands of
watches would cost the store more than the reads (on Kubernetes, one API
watch per lock, behind the client's rate limit, delayed the reads by
minutes).

A lock that has never been taken is unknown to the store: naming it is an
error (exit 1).

` + dirDoc

// outputs accepted by -o.
var outputs = []string{"wide", "json", "yaml"}

// LockStatus is the machine-readable view of one lock (status -o json|yaml).
// Its field names are part of the CLI's interface.
type LockStatus struct {
	Name string `json:"name"`
	// Held reports whether a holder's claim is still valid.
	Held bool `json:"held"`
	// Holder is the current holder, or the last one if the claim expired
	// without a release; empty after a release.
	Holder string `json:"holder"`
	// Token is the last fencing token issued.
	Token uint64 `json:"token"`
	// TTLSeconds is the lease duration the holder asked for.
	TTLSeconds float64 `json:"ttlSeconds"`
	// ExpiresInSeconds is how long the claim still lasts as judged from
	// this machine; 0 if free.
	ExpiresInSeconds float64 `json:"expiresInSeconds"`
	// AcquireTime and RenewTime are wall-clock times written by the
	// holder's or the store's clock, for people.
	AcquireTime *time.Time `json:"acquireTime,omitempty"`
	RenewTime   *time.Time `json:"renewTime,omitempty"`
	Transitions uint64     `json:"transitions"`
	// Version is the store's opaque version of the record.
	Version string `json:"version,omitempty"`
}

// LockStatusList is the view of every lock (status without NAME).
type LockStatusList struct {
	Items []LockStatus `json:"items"`
}

// seconds is d in seconds to the millisecond: 11.475, not
// 11.474592746999999.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

func newLockStatus(r backend.Record) LockStatus {
	s := LockStatus{
		Name:        r.Key,
		Held:        r.Held(),
		Holder:      r.Holder,
		Token:       r.Token,
		TTLSeconds:  seconds(r.TTL),
		Transitions: r.Transitions,
		Version:     r.Version,
	}
	if s.Held {
		s.ExpiresInSeconds = seconds(r.Remaining)
	}
	if !r.AcquireTime.IsZero() {
		t := r.AcquireTime
		s.AcquireTime = &t
	}
	if !r.RenewTime.IsZero() {
		t := r.RenewTime
		s.RenewTime = &t
	}
	return s
}

type statusFlags struct {
	storeFlags
	output string
	watch  bool
}

func (a *app) statusCommand() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status [NAME] [-o wide|json|yaml] [--watch]",
		Short: "Show who holds a lock, or all locks",
		Long:  statusLong,
		Example: `  baton status
  baton status scheduler -o wide
  baton status scheduler --watch`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("status takes at most one lock NAME, got %d arguments: %q", len(args), args)
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			switch f.output {
			case "", "wide", "json", "yaml":
			default:
				return usageErrorf("invalid --output %q (want wide, json or yaml; default: a table)", f.output)
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
				if err := checkName("NAME", name); err != nil {
					return err
				}
			}
			if err := f.storeFlags.validate(); err != nil {
				return err
			}
			if f.dirMissing() && !f.watch {
				if name != "" {
					return fmt.Errorf("lock %q not found: %s does not exist", name, f.dir)
				}
				_, err := fmt.Fprintf(a.stdout, "No locks in %s (it does not exist).\n", f.dir)
				return err
			}
			f.readOnly = true // operators without write access may look
			st, where, err := f.open()
			if err != nil {
				return err
			}
			defer closeStore(st)
			v := &statusView{out: a.stdout, st: st, where: where, name: name, output: f.output}
			if !f.watch {
				if slices.Contains(backendsReading("namespace"), f.backend) {
					v.where += f.kube.missingNamespace(cmd.Context())
				}
				recs, err := v.read(cmd.Context())
				var partial *partialError
				if err != nil && !errors.As(err, &partial) {
					return err
				}
				if perr := v.print(recs, time.Now()); perr != nil {
					return perr
				}
				return err // some records could not be read: exit 1
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), forwardedSignals...)
			defer stop()
			return v.watch(ctx, a)
		}),
	}
	f.storeFlags.register(cmd.Flags())
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "output format: wide, json or yaml (default: a table)")
	cmd.Flags().BoolVarP(&f.watch, "watch", "w", false, "print again on every change until interrupted")
	return cmd
}

type statusView struct {
	out    io.Writer
	st     store
	where  string
	name   string // "" for all locks
	output string
	prints int
}

// read returns the records to show.
func (v *statusView) read(ctx context.Context) ([]backend.Record, error) {
	if v.name != "" {
		r, err := v.st.Get(ctx, v.name)
		if errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("lock %q not found in %s", v.name, v.where)
		}
		if err != nil {
			return nil, fmt.Errorf("reading lock %q: %w", v.name, err)
		}
		return []backend.Record{r}, nil
	}
	l, ok := v.st.(backend.Lister)
	if !ok {
		return nil, errors.New("this backend cannot list its locks; name one: baton status NAME")
	}
	recs, err := l.List(ctx)
	if err != nil && recs == nil {
		return nil, fmt.Errorf("listing locks in %s: %w", v.where, err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Key < recs[j].Key })
	// Records that could not be read are reported but do not hide the
	// others.
	if err != nil {
		return recs, &partialError{err}
	}
	return recs, nil
}

// partialError: some records could not be read.
type partialError struct{ err error }

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

func (v *statusView) print(recs []backend.Record, now time.Time) error {
	defer func() { v.prints++ }()
	switch v.output {
	case "json":
		return v.printJSON(recs)
	case "yaml":
		return v.printYAML(recs)
	default:
		return v.printTable(recs, now)
	}
}

func (v *statusView) document(recs []backend.Record) any {
	if v.name != "" && len(recs) == 1 {
		return newLockStatus(recs[0])
	}
	list := LockStatusList{Items: make([]LockStatus, 0, len(recs))}
	for _, r := range recs {
		list.Items = append(list.Items, newLockStatus(r))
	}
	return list
}

func (v *statusView) printJSON(recs []backend.Record) error {
	b, err := json.MarshalIndent(v.document(recs), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(v.out, "%s\n", b)
	return err
}

func (v *statusView) printYAML(recs []backend.Record) error {
	b, err := yaml.Marshal(v.document(recs))
	if err != nil {
		return err
	}
	if v.prints > 0 {
		if _, err := io.WriteString(v.out, "---\n"); err != nil {
			return err
		}
	}
	_, err = v.out.Write(b)
	return err
}

// printTable writes one table in a single Write, so that a reader of
// --watch output never sees half a table.
func (v *statusView) printTable(recs []backend.Record, now time.Time) error {
	var b bytes.Buffer
	if v.prints > 0 {
		b.WriteString("\n")
	}
	if len(recs) == 0 {
		fmt.Fprintf(&b, "No locks in %s.\n", v.where)
		_, err := v.out.Write(b.Bytes())
		return err
	}
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	wide := v.output == "wide"
	if wide {
		fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tRENEWED\tEXPIRES-IN\tTRANSITIONS\tTTL\tACQUIRED\tVERSION")
	} else {
		fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tRENEWED\tEXPIRES-IN\tTRANSITIONS")
	}
	for _, r := range recs {
		holder, expires := "<none>", "-"
		if r.Held() {
			holder, expires = r.Holder, humanDuration(r.Remaining)
		}
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%d", printable(r.Key), printable(holder), r.Token, ago(r.RenewTime, now), expires, r.Transitions)
		if wide {
			version := r.Version
			if version == "" {
				version = "-"
			}
			ttl := "-" // the store keeps no TTL for a free lock (Redis)
			if r.TTL > 0 {
				ttl = humanDuration(r.TTL)
			}
			row += fmt.Sprintf("\t%s\t%s\t%s", ttl, ago(r.AcquireTime, now), printable(version))
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := v.out.Write(b.Bytes())
	return err
}

// printable returns s as a terminal shows it safely: as it is if every
// character is printable, else quoted with Go's escapes. Holders and names
// come from the store, which others write (a Lease's holderIdentity, a
// Redis key): a control character could rewrite the operator's terminal
// (escape sequences), and a tab or newline shift the table or add a row
// that shows a held lock as free.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// ago formats the time since t, or "-" for a zero time. A t after now,
// written by a clock ahead of this machine's, is "in" that long: shown as
// "0ms ago", it hid the offset between the clocks.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + humanDuration(-d)
	}
	return humanDuration(d) + " ago"
}

// humanDuration formats d briefly, kubectl style: "850ms", "4.2s", "42s",
// "3m12s", "17m", "5h3m", "3d4h".
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < 2*time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < 10*time.Minute:
		m := int(d / time.Minute)
		s := int(d/time.Second) % 60
		if s == 0 {
			return strconv.Itoa(m) + "m"
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 3*time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		h := int(d / time.Hour)
		m := int(d/time.Minute) % 60
		if m == 0 {
			return strconv.Itoa(h) + "h"
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days := int(d / (24 * time.Hour))
		h := int(d/time.Hour) % 24
		if h == 0 {
			return strconv.Itoa(days) + "d"
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}

// signature is what --watch compares: a change of hands, a release, an
// expiry; not a renewal.
type signature struct {
	held        bool
	holder      string
	nonce       string
	token       uint64
	transitions uint64
	ttl         time.Duration
}

func signatures(recs []backend.Record) map[string]signature {
	m := make(map[string]signature, len(recs))
	for _, r := range recs {
		m[r.Key] = signature{r.Held(), r.Holder, r.Nonce, r.Token, r.Transitions, r.TTL}
	}
	return m
}

func sameSignatures(a, b map[string]signature) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// watch prints, then prints again on every change until ctx ends.
func (v *statusView) watch(ctx context.Context, a *app) error {
	wake := make(chan struct{}, 1)
	w := newWatchSet(ctx, v.st, wake, a)
	defer w.close()

	recs, err := v.read(ctx)
	var partial *partialError
	if err != nil && !errors.As(err, &partial) {
		return err
	}
	if err := v.print(recs, time.Now()); err != nil {
		return err
	}
	last := signatures(recs)
	if v.name != "" {
		w.watch(v.name)
	}
	w.watchAll(recs)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
		recs, err := v.read(ctx)
		if err != nil && !errors.As(err, &partial) {
			if ctx.Err() != nil {
				return nil
			}
			a.log.Warn("status: read failed", "err", err)
			continue
		}
		w.watchAll(recs)
		sig := signatures(recs)
		if sameSignatures(sig, last) {
			continue
		}
		last = sig
		if err := v.print(recs, time.Now()); err != nil {
			return err
		}
	}
}

// maxStatusWatches is how many locks status --watch watches at most; it
// reads the others every second only.
const maxStatusWatches = 16

// watchSet keeps one store watch per lock and folds their events into one
// channel. A watch that breaks is started again at the next watch call.
type watchSet struct {
	ctx  context.Context
	st   backend.Watcher // nil: poll
	wake chan<- struct{}
	log  *app

	mu     sync.Mutex
	active map[string]context.CancelFunc
	wg     sync.WaitGroup
}

func newWatchSet(ctx context.Context, st store, wake chan<- struct{}, a *app) *watchSet {
	w := &watchSet{ctx: ctx, wake: wake, log: a, active: map[string]context.CancelFunc{}}
	if wt, ok := st.(backend.Watcher); ok {
		w.st = wt
	}
	return w
}

// watchAll watches the first maxStatusWatches of recs (sorted by name).
func (w *watchSet) watchAll(recs []backend.Record) {
	for _, r := range recs[:min(len(recs), maxStatusWatches)] {
		w.watch(r.Key)
	}
}

func (w *watchSet) watch(key string) {
	if w.st == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.active[key]; ok || len(w.active) >= maxStatusWatches {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	ch, err := w.st.Watch(ctx, key)
	if err != nil {
		cancel()
		w.log.log.Debug("status: watch failed; polling", "lock", key, "err", err)
		return
	}
	w.active[key] = cancel
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for range ch {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		w.mu.Lock()
		delete(w.active, key)
		w.mu.Unlock()
		cancel()
	}()
}

func (w *watchSet) close() {
	w.mu.Lock()
	for _, cancel := range w.active {
		cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}
