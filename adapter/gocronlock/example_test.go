package gocronlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/adapter/gocronlock"
	"github.com/baton-go/baton/memstore"
	"github.com/go-co-op/gocron/v2"
)

// Each run of a job takes the job's lock first; the scheduler that does
// not get it skips the run.
func ExampleLocker() {
	store := memstore.New() // in production: a store all replicas share
	locker, err := gocronlock.NewLocker(store,
		gocronlock.WithPrefix("billing."),
		gocronlock.WithMinHold(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	_, err = s.NewJob(gocron.CronJob("0 3 * * *", false),
		gocron.NewTask(func() { fmt.Println("writing the nightly report") }),
		gocron.WithName("nightly-report"))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	// Names gocron derives from functions are not lock names:
	if _, err := locker.LockName("main.nightlyReport"); err != nil {
		fmt.Println(err)
	}
	name, _ := locker.LockName("nightly-report")
	fmt.Println("lock:", name)
	// Output:
	// gocronlock: job "main.nightlyReport": lock name "billing.main.nightlyReport": invalid lock name: "billing.main.nightlyReport" has the character 'R' at byte 20; use lower-case letters, digits, '-' and '.' (name the job with gocron.WithName)
	// lock: billing.nightly-report
}

// All jobs of a scheduler run on the replica that leads.
func ExampleElector() {
	store := memstore.New() // in production: a store all replicas share
	el, err := baton.NewElector(store, "billing-scheduler")
	if err != nil {
		log.Fatal(err)
	}
	elector := gocronlock.NewElector(el)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()
	defer func() { cancel(); <-done }()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	_, err = s.NewJob(gocron.DurationJob(time.Minute),
		gocron.NewTask(func() {
			if term := elector.Term(); term != nil {
				fmt.Println("sweeping with fencing token", term.Token())
			}
		}),
		gocron.WithName("sweep"))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
}
