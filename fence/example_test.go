package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/memstore"
)

// Two holders of one lock write a file through a Register. The first
// holder's write arrives after the second holder took over, and is
// rejected.
func Example() {
	ctx := context.Background()
	store := memstore.New()
	var reg fence.Register
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "report.txt")
	write := func(l *baton.Lease, text string) error {
		return reg.Do(l.Name(), l.Token(), func() error {
			return os.WriteFile(report, []byte(text), 0o644)
		})
	}

	a, _ := baton.NewMutex(store, "report", baton.WithIdentity("replica-a"))
	b, _ := baton.NewMutex(store, "report", baton.WithIdentity("replica-b"))
	first, err := a.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// replica-a loses the lock (here: it unlocks; in life: it was paused
	// past its TTL) and replica-b takes it with a larger token.
	_ = first.Unlock(ctx)
	second, err := b.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)

	fmt.Println("b:", write(second, "written by b"))
	err = write(first, "written by a, late")
	fmt.Println("a:", err, errors.Is(err, fence.ErrStaleToken))
	data, _ := os.ReadFile(report)
	fmt.Println(string(data))
	// Output:
	// b: <nil>
	// a: fence: stale fencing token for "report": 1 rejected, 2 already accepted true
	// written by b
}

func ExampleRegister_Write() {
	var reg fence.Register
	fmt.Println(reg.Write("cache", 5))
	fmt.Println(reg.Write("cache", 5)) // the same holder again
	err := reg.Write("cache", 4)
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// true
}

// Fence the writes of a lock holder in PostgreSQL. The token check and the
// protected writes commit together; a late writer gets ErrStaleToken and
// nothing of its transaction is kept. (db is opened with any PostgreSQL
// driver, for example sql.Open("pgx", dsn) with github.com/jackc/pgx/v5/stdlib.)
func ExampleSQLGuard() {
	var (
		ctx   = context.Background()
		db    *sql.DB      // sql.Open("pgx", dsn)
		lease *baton.Lease // from Mutex.Lock
	)
	guard, err := fence.NewSQLGuard(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Ensure(ctx); err != nil {
		log.Fatal(err)
	}
	err = guard.Exec(ctx, lease.Name(), lease.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance * 1.01")
		return err
	})
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		log.Print("lost the lock to a newer holder; nothing was written")
	case errors.Is(err, fence.ErrCommitUnknown):
		// Not idempotent: a blind retry could pay the interest twice.
		log.Print("the connection ended during the commit; read the balances before writing again")
	}
}

// Run a scheduled slot's work at most once, even if two replicas both
// believe they hold the slot's lock.
func ExampleRunLog_Exec() {
	var (
		ctx  = context.Background()
		db   *sql.DB                          // sql.Open("pgx", dsn)
		slot = time.Now().Truncate(time.Hour) // the slot being run
	)
	runs, err := fence.NewRunLog(db, "") // table baton_runs
	if err != nil {
		log.Fatal(err)
	}
	if err := runs.Ensure(ctx); err != nil {
		log.Fatal(err)
	}
	ran, err := runs.Exec(ctx, "nightly-report", slot, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO reports (slot) VALUES ($1)", slot)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	if !ran {
		log.Print("slot already done")
	}
}
