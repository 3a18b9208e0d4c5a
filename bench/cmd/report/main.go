// Command report turns the benchmark reports' results into plots and
// splices their Markdown into docs/benchmarks.md.
//
//	go run ./cmd/report -doc ../docs/benchmarks.md -img ../docs/img \
//	    -kube out/kube.json -scale out/scale.json \
//	    -frag kube=out/kube.md -frag redis=out/redis.md -frag scale=out/scale.md
//
// Each -frag name=path replaces the text between the lines
// "<!-- bench:name:begin -->" and "<!-- bench:name:end -->" in the document,
// so that the prose around the generated blocks stays as written. A
// document without a name's markers is left alone for that name, with a
// warning (a section maintained by hand). A missing fragment file or any
// other error is reported, that block is left as it was, and the command
// exits with status 1 after doing the rest.
//
// -micro path reads the output of go test -bench (several -count runs) and
// writes, to -micro-out, a Markdown table of the median and range of each
// benchmark, for splicing like any other fragment.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/baton-go/baton/bench"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

type frags []string

func (f *frags) String() string     { return strings.Join(*f, ",") }
func (f *frags) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	var (
		doc       = flag.String("doc", "", "Markdown document to splice fragments into")
		img       = flag.String("img", "", "directory for the PNG plots")
		kubeJSON  = flag.String("kube", "", "TestKubeReport results (JSON)")
		scaleJSON = flag.String("scale", "", "TestScaleReport results (JSON)")
		micro     = flag.String("micro", "", "go test -bench output to summarize")
		microOut  = flag.String("micro-out", "", "where to write the summary of -micro (Markdown)")
		fragments frags
	)
	flag.Var(&fragments, "frag", "name=path: splice path between the name's markers (repeatable)")
	flag.Parse()
	failed := false
	warn := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...)
		failed = true
	}

	if *micro != "" {
		data, err := os.ReadFile(*micro)
		if err != nil {
			warn("%v", err)
		} else if err := os.WriteFile(*microOut, []byte(microTable(string(data))), 0o644); err != nil {
			warn("%v", err)
		}
	}

	if *img != "" {
		if err := os.MkdirAll(*img, 0o755); err != nil {
			warn("%v", err)
		}
		if *kubeJSON != "" {
			var k bench.KubeResults
			if err := bench.ReadJSON(*kubeJSON, &k); err != nil {
				warn("%v", err)
			} else {
				for name, f := range map[string]func(bench.KubeResults) (*plot.Plot, error){
					"kube-handover.png":      kubeHandoverPlot,
					"kube-failover.png":      kubeFailoverPlot,
					"kube-requests.png":      kubeRequestsPlot,
					"kube-leader-writes.png": kubeLeaderWritesPlot,
				} {
					save(warn, f, k, filepath.Join(*img, name))
				}
			}
		}
		if *scaleJSON != "" {
			var s bench.ScaleResults
			if err := bench.ReadJSON(*scaleJSON, &s); err != nil {
				warn("%v", err)
			} else {
				save(warn, scaleMemoryPlot, s, filepath.Join(*img, "scale-memory.png"))
				save(warn, scaleCPUPlot, s, filepath.Join(*img, "scale-cpu.png"))
			}
		}
	}

	if *doc != "" && len(fragments) > 0 {
		text, err := os.ReadFile(*doc)
		if err != nil {
			warn("%v", err)
		} else {
			for _, f := range fragments {
				name, path, ok := strings.Cut(f, "=")
				if !ok {
					warn("-frag %q: want name=path", f)
					continue
				}
				body, err := os.ReadFile(path)
				if err != nil {
					warn("fragment %s: %v (block left as it was)", name, err)
					continue
				}
				next, err := splice(text, name, body)
				if err != nil {
					fmt.Fprintf(os.Stderr, "report: %v: %s not spliced (section kept as written)\n", err, path)
					continue
				}
				text = next
			}
			if err := os.WriteFile(*doc, text, 0o644); err != nil {
				warn("%v", err)
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}

// splice replaces the lines between name's begin and end markers with body.
func splice(doc []byte, name string, body []byte) ([]byte, error) {
	begin := []byte("<!-- bench:" + name + ":begin -->\n")
	end := []byte("<!-- bench:" + name + ":end -->")
	i := bytes.Index(doc, begin)
	j := bytes.Index(doc, end)
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers in the document", strings.TrimSpace(string(begin)), end)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString("\n")
	out.Write(bytes.TrimSpace(body))
	out.WriteString("\n\n")
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// microTable summarizes go test -bench output: per package and benchmark,
// the median and range of ns/op over the runs, and the median B/op and
// allocs/op.
func microTable(out string) string {
	type key struct{ pkg, name string }
	var (
		order []key
		ns    = map[key][]float64{}
		bytes = map[key][]float64{}
		alloc = map[key][]float64{}
		pkg   string
		head  []string
	)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && (f[0] == "goos:" || f[0] == "goarch:" || f[0] == "cpu:"):
			if !slices.Contains(head, line) {
				head = append(head, line)
			}
		case len(f) >= 2 && f[0] == "cpu:":
			if !slices.Contains(head, line) {
				head = append(head, line)
			}
		case strings.HasPrefix(line, "load average") || strings.HasPrefix(line, "go version") || strings.HasPrefix(line, "date "):
			head = append(head, strings.TrimSpace(line))
		case len(f) == 2 && f[0] == "pkg:":
			pkg = f[1]
		case len(f) >= 4 && strings.HasPrefix(f[0], "Benchmark"):
			name := f[0]
			if i := strings.LastIndex(name, "-"); i > 0 {
				name = name[:i] // the GOMAXPROCS suffix
			}
			k := key{pkg, name}
			if _, ok := ns[k]; !ok {
				order = append(order, k)
			}
			for i := 2; i+1 < len(f); i += 2 {
				var v float64
				if _, err := fmt.Sscan(f[i], &v); err != nil {
					continue
				}
				switch f[i+1] {
				case "ns/op":
					ns[k] = append(ns[k], v)
				case "B/op":
					bytes[k] = append(bytes[k], v)
				case "allocs/op":
					alloc[k] = append(alloc[k], v)
				}
			}
		}
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", strings.Join(head, "; "))
	fmt.Fprintf(&b, "| package | benchmark | n | median | range | B/op | allocs/op |\n|---|---|---:|---:|---|---:|---:|\n")
	for _, k := range order {
		v := slices.Clone(ns[k])
		slices.Sort(v)
		rng := ""
		if len(v) > 0 {
			rng = fmtNS(v[0]) + "–" + fmtNS(v[len(v)-1])
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %d | %s | %s | %.0f | %.0f |\n", k.pkg, k.name, len(v), fmtNS(med(v)), rng, med(bytes[k]), med(alloc[k]))
	}
	return b.String()
}

func fmtNS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2f µs", v/1e3)
	default:
		return fmt.Sprintf("%.0f ns", v)
	}
}

func save[T any](warn func(string, ...any), f func(T) (*plot.Plot, error), v T, path string) {
	p, err := f(v)
	if err != nil {
		warn("%s: %v", path, err)
		return
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		warn("%s: %v", path, err)
		return
	}
	fmt.Println("wrote", path)
}

// logTicks are log-scale ticks labelled in plain numbers.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		v := math.Pow(10, e)
		ticks = append(ticks, plot.Tick{Value: v, Label: trimFloat(v)})
		for _, m := range []float64{2, 5} {
			ticks = append(ticks, plot.Tick{Value: m * v})
		}
	}
	return ticks
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%g", v)
	if v >= 1e4 {
		s = fmt.Sprintf("%.0f", v)
	}
	return s
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// libraries returns the library names in first-seen order.
func libraries[T any](rows []T, lib func(T) string) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, lib(r)) {
			out = append(out, lib(r))
		}
	}
	return out
}

func timings[T any](rows []T, tm func(T) string) []string { return libraries(rows, tm) }

// dotPlot draws, on a log Y axis, one point per (timing, library) for p50
// and a smaller one for p99, grouped by timing along X.
func dotPlot(title, y string, tms, libs []string, value func(tm, lib string) (p50, p99 float64, ok bool)) (*plot.Plot, error) {
	p := newPlot(title, "LeaseDuration/RenewDeadline/RetryPeriod", y)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	var names []string
	for _, tm := range tms {
		names = append(names, tm)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for li, lib := range libs {
		var p50s, p99s plotter.XYs
		for ti, tm := range tms {
			a, b, ok := value(tm, lib)
			if !ok {
				continue
			}
			x := float64(ti) + (float64(li)-float64(len(libs)-1)/2)*0.25
			a, b = max(a, 0.1), max(b, 0.1) // a log axis has no zero
			p50s = append(p50s, plotter.XY{X: x, Y: a})
			p99s = append(p99s, plotter.XY{X: x, Y: b})
			lo, hi = min(lo, a, b), max(hi, a, b)
		}
		s50, err := plotter.NewScatter(p50s)
		if err != nil {
			return nil, err
		}
		s50.GlyphStyle.Color = plotutil.Color(li)
		s50.GlyphStyle.Shape = draw.CircleGlyph{}
		s50.GlyphStyle.Radius = vg.Points(5)
		s99, err := plotter.NewScatter(p99s)
		if err != nil {
			return nil, err
		}
		s99.GlyphStyle.Color = plotutil.Color(li)
		s99.GlyphStyle.Shape = draw.TriangleGlyph{}
		s99.GlyphStyle.Radius = vg.Points(3)
		p.Add(s50, s99)
		p.Legend.Add(lib+" p50", s50)
		p.Legend.Add(lib+" p99", s99)
		for _, xy := range p50s {
			l, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{xy}, Labels: []string{" " + fmtMS(xy.Y)}})
			if err == nil {
				p.Add(l)
			}
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	if lo <= hi {
		p.Y.Min, p.Y.Max = lo/2, hi*40 // room for the legend
	}
	return p, nil
}

func fmtMS(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.1fms", ms)
	}
}

func kubeHandoverPlot(k bench.KubeResults) (*plot.Plot, error) {
	return dotPlot("Kubernetes Lease: release-to-new-leader handover", "ms (log scale)",
		timings(k.Handover, func(r bench.KubeHandover) string { return r.Timing }),
		libraries(k.Handover, func(r bench.KubeHandover) string { return r.Library }),
		func(tm, lib string) (float64, float64, bool) {
			for _, r := range k.Handover {
				if r.Timing == tm && r.Library == lib && r.N > 0 {
					return r.P50, r.P99, true
				}
			}
			return 0, 0, false
		})
}

func kubeFailoverPlot(k bench.KubeResults) (*plot.Plot, error) {
	return dotPlot("Crash failover: delay after the lease can be judged expired", "ms after judgeable (log scale)",
		timings(k.Failover, func(r bench.KubeFailover) string { return r.Timing }),
		libraries(k.Failover, func(r bench.KubeFailover) string { return r.Library }),
		func(tm, lib string) (float64, float64, bool) {
			for _, r := range k.Failover {
				if r.Timing == tm && r.Library == lib && r.N > 0 {
					return r.ExcessP50, r.ExcessP99, true
				}
			}
			return 0, 0, false
		})
}

func kubeRequestsPlot(k bench.KubeResults) (*plot.Plot, error) {
	p := newPlot("Idle standby: API requests per minute", "candidates", "requests/min (largest idle standby)")
	var args []any
	for _, tm := range timings(k.Requests, func(r bench.KubeRequests) string { return r.Timing }) {
		for _, lib := range libraries(k.Requests, func(r bench.KubeRequests) string { return r.Library }) {
			var xys plotter.XYs
			for _, r := range k.Requests {
				if r.Timing == tm && r.Library == lib && r.Candidates > 1 {
					xys = append(xys, plotter.XY{X: float64(r.Candidates), Y: r.StandbyMax})
				}
			}
			if len(xys) > 0 {
				args = append(args, lib+" "+tm, xys)
			}
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Max *= 1.6 // room for the legend
	return p, nil
}

func kubeLeaderWritesPlot(k bench.KubeResults) (*plot.Plot, error) {
	p := newPlot("Leader: Lease writes per minute", "candidates", "PUT/min")
	var args []any
	for _, tm := range timings(k.Requests, func(r bench.KubeRequests) string { return r.Timing }) {
		for _, lib := range libraries(k.Requests, func(r bench.KubeRequests) string { return r.Library }) {
			var xys plotter.XYs
			for _, r := range k.Requests {
				if r.Timing == tm && r.Library == lib {
					xys = append(xys, plotter.XY{X: float64(r.Candidates), Y: r.LeaderWrites})
				}
			}
			args = append(args, lib+" "+tm, xys)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Max *= 1.6 // room for the legend
	return p, nil
}

func scaleSeries(s bench.ScaleResults, minLocks int, y func(bench.ScaleHold) float64) []any {
	var args []any
	for _, b := range libraries(s.Hold, func(r bench.ScaleHold) string { return r.Backend }) {
		var xys plotter.XYs
		for _, r := range s.Hold {
			if r.Backend == b && r.Locks >= minLocks {
				xys = append(xys, plotter.XY{X: float64(r.Locks), Y: y(r)})
			}
		}
		args = append(args, b, xys)
	}
	return args
}

func scaleMemoryPlot(s bench.ScaleResults) (*plot.Plot, error) {
	// With one lock the heap delta is within the GC's noise (tens of KiB).
	p := newPlot("Memory per held lock (live heap + goroutine stacks), 100 locks and more", "locks held by one process (log scale)", "KiB per lock")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	if err := plotutil.AddLinePoints(p, scaleSeries(s, 100, func(r bench.ScaleHold) float64 {
		return max(r.HeapBytesPerLock+r.StackBytesPerLock, 0) / 1024
	})...); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Max *= 1.4 // room for the legend
	return p, nil
}

func scaleCPUPlot(s bench.ScaleResults) (*plot.Plot, error) {
	p := newPlot("CPU per held lock (this process)", "locks held by one process (log scale)", "CPU ms per minute per lock (log scale)")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	if err := plotutil.AddLinePoints(p, scaleSeries(s, 1, func(r bench.ScaleHold) float64 {
		return max(r.CPUSecPerMin*1000/float64(r.Locks), 0.001)
	})...); err != nil {
		return nil, err
	}
	return p, nil
}
