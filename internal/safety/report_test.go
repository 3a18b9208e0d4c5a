//go:build linux

package safety

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

var (
	resultsMu sync.Mutex
	results   []*result
)

func recordResult(r *result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

// writeReport writes the Markdown table of every scenario that ran to the
// path given by -safety.report or BATON_SAFETY_REPORT, if any.
func writeReport() error {
	path := *reportFlag
	if path == "" {
		path = os.Getenv("BATON_SAFETY_REPORT")
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if path == "" || len(results) == 0 {
		return nil
	}
	return os.WriteFile(path, []byte(reportTable(results)), 0o644)
}

func reportTable(rs []*result) string {
	var b strings.Builder
	mode := "short"
	if long() {
		mode = "long"
	}
	fmt.Fprintf(&b, "Mode %s, seed %d, K=%d contender processes.\n\n", mode, seed, K)
	b.WriteString("| backend | fault | ops | acquisitions | faults | stale writes attempted | stale writes accepted | unfenced: lost updates | unfenced: stale writes | unfenced: two holders | takeover p50 | takeover p99 | porcupine | time |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range rs {
		p50, p99 := "–", "–"
		if len(r.takeovers) > 0 {
			p50 = percentile(r.takeovers, 50).Round(10 * time.Millisecond).String()
			p99 = percentile(r.takeovers, 99).Round(10 * time.Millisecond).String()
		}
		lin := "ok"
		if !strings.HasPrefix(r.linearizable, "linearizable") {
			lin = r.linearizable
		}
		fault := r.fault
		if r.variant != "" {
			fault += " (" + r.variant + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %v |\n",
			r.backend, fault, r.ops, r.acquisitions, r.faults, r.staleWrites, r.staleAccepted,
			r.plainLost, r.plainStale, r.twoHolders, p50, p99, lin, r.elapsed.Round(100*time.Millisecond))
	}
	// Every takeover after a holder failed (pause, crash, partition), per
	// backend: more samples than one row has.
	byBackend := map[string][]time.Duration{}
	var backends []string
	for _, r := range rs {
		if r.fault == faultRestart || len(r.takeovers) == 0 {
			continue
		}
		if _, ok := byBackend[r.backend]; !ok {
			backends = append(backends, r.backend)
		}
		byBackend[r.backend] = append(byBackend[r.backend], r.takeovers...)
	}
	if len(backends) > 0 {
		b.WriteString("\nEvery takeover after the holder was paused, killed or cut off, per backend (from the fault to the successor's report that it acquired):\n\n")
		b.WriteString("| backend | takeovers | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n")
		for _, be := range backends {
			ds := byBackend[be]
			fmt.Fprintf(&b, "| %s | %d | %v | %v | %v |\n", be, len(ds),
				percentile(ds, 50).Round(10*time.Millisecond), percentile(ds, 99).Round(10*time.Millisecond),
				slices.Max(ds).Round(10*time.Millisecond))
		}
	}
	var margins []string
	for _, r := range rs {
		if len(r.margins) > 0 {
			margins = append(margins, fmt.Sprintf("%s %v", r.backend, slices.Min(r.margins).Round(10*time.Millisecond)))
		}
	}
	if len(margins) > 0 {
		fmt.Fprintf(&b, "\nPartition: the cut-off holder reported the end of its tenure before the successor reported its acquisition, by at least: %s.\n",
			strings.Join(margins, ", "))
	}
	return b.String()
}
