package batonprom_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batonprom"
	"github.com/baton-go/baton/memstore"
)

// A Mutex reports to a Collector on its own registry; baton_leader is 1
// while the lock is held and 0 after Unlock. Serve the registry with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := batonprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	metrics.Init("nightly-report") // export 0 before the first attempt

	m, err := baton.NewMutex(memstore.New(), "nightly-report", baton.WithObserver(metrics))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	show := func() {
		text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "baton_leader", "baton_fencing_token")
		if err != nil {
			log.Fatal(err)
		}
		os.Stdout.Write(text)
	}
	show()
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Unlock:")
	show()
	// Output:
	// # HELP baton_fencing_token Fencing token of the last lease of the lock this process acquired (0: none yet).
	// # TYPE baton_fencing_token gauge
	// baton_fencing_token{lock="nightly-report"} 1
	// # HELP baton_leader 1 while this process holds the lock (leads), else 0.
	// # TYPE baton_leader gauge
	// baton_leader{lock="nightly-report"} 1
	// after Unlock:
	// # HELP baton_fencing_token Fencing token of the last lease of the lock this process acquired (0: none yet).
	// # TYPE baton_fencing_token gauge
	// baton_fencing_token{lock="nightly-report"} 1
	// # HELP baton_leader 1 while this process holds the lock (leads), else 0.
	// # TYPE baton_leader gauge
	// baton_leader{lock="nightly-report"} 0
}

// Combine the Collector with other observers through baton.Observers.
func ExampleCollector_Observe() {
	reg := prometheus.NewRegistry()
	metrics, err := batonprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	logEvents := baton.ObserverFunc(func(e baton.Event) { fmt.Println("event:", e.Kind, e.Name) })
	m, err := baton.NewMutex(memstore.New(), "reports", baton.WithObserver(baton.Observers(metrics, logEvents)))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "baton_acquisitions_total" {
			fmt.Println("acquisitions:", mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	if err := lease.Unlock(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Output:
	// event: acquired reports
	// acquisitions: 1
	// event: released reports
}
