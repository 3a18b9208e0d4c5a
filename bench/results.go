// Package bench holds baton's side-by-side benchmark reports (in its tests)
// and the machine-readable results they write beside their Markdown, which
// cmd/report turns into plots and splices into docs/benchmarks.md.
package bench

import (
	"encoding/json"
	"os"
	"strings"
)

// KubeResults are the figures of TestKubeReport.
type KubeResults struct {
	Machine  string
	FloorP50 float64 // ms, one conditional Lease PUT
	FloorP99 float64 // ms
	Handover []KubeHandover
	Failover []KubeFailover
	Requests []KubeRequests
}

// KubeHandover is one row of the release-to-new-leader table (times in ms).
type KubeHandover struct {
	Timing, Library string
	N               int
	P50, P99        float64
}

// KubeFailover is one row of the crash failover table (times in ms).
type KubeFailover struct {
	Timing, Library string
	LeaseSeconds    float64
	N               int
	P50, P99        float64 // last successful renew -> standby's work
	ExcessP50       float64 // work started - (standby observed the renewal + LeaseDuration)
	ExcessP99       float64
}

// KubeRequests is the steady-state request rate of one set of candidates.
type KubeRequests struct {
	Timing, Library   string
	Candidates        int
	Leader            float64 // requests/min
	LeaderWrites      float64 // PUT/min
	StandbyMedian     float64 // requests/min of the median idle standby
	StandbyMax        float64
	LeadershipChanged bool
}

// ScaleResults are the figures of TestScaleReport.
type ScaleResults struct {
	Machine string
	Floors  []string // per store server: its speed in the run
	Hold    []ScaleHold
	Idle    []ScaleIdle
}

// ScaleHold is one backend holding Locks locks in one process.
type ScaleHold struct {
	Backend            string
	Locks              int
	Seconds            float64 // measured window
	EngineRenewsPerSec float64 // Backend.Renew calls per second
	StoreReqsPerSec    float64 // requests that reached the store, per second (-1: not counted)
	CPUSecPerMin       float64 // this process's CPU seconds per minute of holding
	CPUSlices          int     // the window cut into TTL/3 slices:
	CPUSliceMedian     float64 // median CPU s/min of a slice
	CPUSliceMax        float64 // largest
	StoreCPUSecPerMin  float64 // the store server's, where measured (-1: not measured)
	HeapBytesPerLock   float64 // live heap after GC, delta over the empty process, per lock
	StackBytesPerLock  float64 // goroutine stacks, the same way
	AcquireSeconds     float64 // time to take all the locks
	GoroutinesPerLock  float64
	Lost               int // leases lost during the window
}

// ScaleIdle is N idle electors (standbys) on one lock held by another.
type ScaleIdle struct {
	Backend              string
	Electors             int
	HeapBytesPerElector  float64
	StackBytesPerElector float64
	GoroutinesPerElector float64
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadJSON reads path into v.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// JSONPath is where a report that writes its Markdown to mdPath writes its
// figures: the same name with .json for .md.
func JSONPath(mdPath string) string {
	return strings.TrimSuffix(mdPath, ".md") + ".json"
}
