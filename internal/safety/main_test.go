//go:build linux

package safety

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// roleEnv is set to "contender" in the processes the tests start: the test
// binary re-executes itself as a contender (contenderMain) and never runs
// the tests or goleak there.
const roleEnv = "BATON_SAFETY_ROLE"

var (
	seedFlag   = flag.Int64("safety.seed", 0, "seed of the fault schedule (0: from the clock; logged)")
	longFlag   = flag.Bool("safety.long", false, "run the long mode: more rounds, backends and faults (also BATON_SAFETY_LONG=1)")
	reportFlag = flag.String("safety.report", "", "write the Markdown report table to this file (also BATON_SAFETY_REPORT)")
)

// seed is the run's seed; every scenario derives its own from it.
var seed int64

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "contender" {
		os.Exit(contenderMain())
	}
	flag.Parse()
	seed = *seedFlag
	if seed == 0 {
		if s, err := strconv.ParseInt(os.Getenv("BATON_SAFETY_SEED"), 10, 64); err == nil && s != 0 {
			seed = s
		} else {
			seed = time.Now().UnixNano() % 1_000_000_000
		}
	}
	fmt.Fprintf(os.Stderr, "safety: seed %d (replay with -safety.seed=%d)\n", seed, seed)
	code := m.Run()
	if err := writeReport(); err != nil {
		fmt.Fprintf(os.Stderr, "safety: writing the report: %v\n", err)
		code = 1
	}
	if err := stopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "safety: stopping the control plane: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// long reports whether the long mode is on.
func long() bool {
	if *longFlag {
		return true
	}
	v, err := strconv.ParseBool(os.Getenv("BATON_SAFETY_LONG"))
	return err == nil && v
}
