package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/memstore"
)

// openDB opens pg's database, closed at the end of t.
func openDB(t *testing.T, pg *testenv.Postgres) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// One PostgreSQL serves all subtests; each uses its own tables.
func TestPostgres(t *testing.T) {
	pg := testenv.StartPostgres(t)
	db := openDB(t, pg)
	db.SetMaxOpenConns(20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping: %v\n%s", err, pg.Log())
	}

	runSuite(ctx, t, db)
}

// runSuite runs the helpers' tests on db, each with its own tables.
func runSuite(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Run("StaleRejectedAndRolledBack", func(t *testing.T) { testStale(ctx, t, db) })
	t.Run("EqualTokenAccepted", func(t *testing.T) { testEqual(ctx, t, db) })
	t.Run("TokenRange", func(t *testing.T) { testTokenRange(ctx, t, db) })
	t.Run("StaleWriterWaitsForNewer", func(t *testing.T) { testWaits(ctx, t, db) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testConcurrent(ctx, t, db) })
	t.Run("PausedBatonHolder", func(t *testing.T) { testPausedHolder(ctx, t, db) })
	t.Run("PanickingWriteRolledBack", func(t *testing.T) { testPanickingWrite(ctx, t, db) })
	t.Run("RunLog", func(t *testing.T) { testRunLog(ctx, t, db) })
	t.Run("RunLogConcurrent", func(t *testing.T) { testRunLogConcurrent(ctx, t, db) })
}

// A write that panics (recovered above Exec, as net/http recovers a
// handler's panic) leaves nothing behind: its writes are rolled back, its
// connection goes back to the pool, and the fence row it locked is free for
// the next holder.
func testPanickingWrite(ctx context.Context, t *testing.T, db *sql.DB) {
	g, data := newGuard(ctx, t, db, "panicking")
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want write's panic", r)
			}
		}()
		_ = g.Exec(ctx, "job", 1, func(tx *sql.Tx) error {
			if err := put(data, "x", "one", 1)(tx); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if inUse := db.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections still in use after the panic, want 0 (the transaction was not rolled back)", inUse)
	}
	if v := get(ctx, t, db, data, "x"); v != "<none>" {
		t.Fatalf("x = %q after the panicking write, want it rolled back", v)
	}
	// Without the rollback this would wait on the leaked transaction's
	// row lock until ctx ends.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := g.Exec(wctx, "job", 2, put(data, "x", "two", 2)); err != nil {
		t.Fatalf("the next holder's Exec = %v, want it to write", err)
	}
}

// newGuard makes a guard on a fence table of its own, and a protected
// table "<prefix>_data (k text primary key, v text, token bigint)".
func newGuard(ctx context.Context, t *testing.T, db *sql.DB, prefix string) (*fence.SQLGuard, string) {
	t.Helper()
	g, err := fence.NewSQLGuard(db, fence.WithTable(prefix+"_fence"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Ensure(ctx); err != nil { // idempotent
		t.Fatalf("second Ensure: %v", err)
	}
	data := prefix + "_data"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+data+" (k text PRIMARY KEY, v text NOT NULL, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return g, data
}

func put(data, k, v string, token uint64) func(tx *sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO "+data+" (k, v, token) VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, token = EXCLUDED.token", k, v, int64(token))
		return err
	}
}

func get(ctx context.Context, t *testing.T, db *sql.DB, data, k string) string {
	t.Helper()
	var v string
	err := db.QueryRowContext(ctx, "SELECT v FROM "+data+" WHERE k = $1", k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testStale(ctx context.Context, t *testing.T, db *sql.DB) {
	g, data := newGuard(ctx, t, db, "stale")
	if err := g.Exec(ctx, "job", 10, put(data, "x", "ten", 10)); err != nil {
		t.Fatal(err)
	}
	// Exec: the check fails first, and write is not called.
	called := false
	err := g.Exec(ctx, "job", 9, func(tx *sql.Tx) error { called = true; return put(data, "x", "nine", 9)(tx) })
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Exec with 9 after 10 = %v; want ErrStaleToken", err)
	}
	if called {
		t.Fatal("write called for a stale token")
	}
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 9 || !stale.Known || stale.Stored != 10 || stale.Name != "job" {
		t.Fatalf("error = %#v", stale)
	}
	t.Log(err)

	// A protected write made before the check in the same transaction is
	// rolled back with it.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := put(data, "y", "eight", 8)(tx); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, tx, "job", 8); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Check(8) = %v; want ErrStaleToken", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if v := get(ctx, t, db, data, "x"); v != "ten" {
		t.Fatalf("x = %q; want ten", v)
	}
	if v := get(ctx, t, db, data, "y"); v != "<none>" {
		t.Fatalf("y = %q; the stale write committed", v)
	}
	if tok, ok, err := g.Token(ctx, "job"); err != nil || !ok || tok != 10 {
		t.Fatalf("Token = %d, %v, %v; want 10", tok, ok, err)
	}
	// A failing write rolls back its fence update too.
	boom := errors.New("boom")
	if err := g.Exec(ctx, "job", 11, func(*sql.Tx) error { return boom }); err != boom {
		t.Fatalf("Exec = %v; want boom", err)
	}
	if tok, _, _ := g.Token(ctx, "job"); tok != 10 {
		t.Fatalf("fence token after failed write = %d; want 10", tok)
	}
	if _, ok, err := g.Token(ctx, "other"); ok || err != nil {
		t.Fatalf("Token(other) = %v, %v; want none", ok, err)
	}
}

func testEqual(ctx context.Context, t *testing.T, db *sql.DB) {
	g, data := newGuard(ctx, t, db, "equal")
	for i, v := range []string{"first", "second"} {
		if err := g.Exec(ctx, "job", 7, put(data, "x", v, 7)); err != nil {
			t.Fatalf("write %d with the same token: %v", i, err)
		}
	}
	if v := get(ctx, t, db, data, "x"); v != "second" {
		t.Fatalf("x = %q; want second", v)
	}
	if err := g.Exec(ctx, "job", 8, put(data, "x", "third", 8)); err != nil {
		t.Fatal(err)
	}
}

func testTokenRange(ctx context.Context, t *testing.T, db *sql.DB) {
	g, _ := newGuard(ctx, t, db, "rng")
	if err := g.Exec(ctx, "job", math.MaxInt64, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("MaxInt64: %v", err)
	}
	err := g.Exec(ctx, "job", math.MaxInt64+1, func(*sql.Tx) error { return nil })
	if err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("token > MaxInt64: %v; want a range error", err)
	}
}

// awaitLockWait returns once a session of db waits for a lock, as
// PostgreSQL reports in pg_stat_activity: the writer started in the
// background is blocked on the newer transaction's row lock. It fails the
// test if the writer returns first (done) or nothing waits within 10s.
func awaitLockWait(ctx context.Context, t *testing.T, db *sql.DB, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the writer did not wait for the open newer transaction: it returned %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waits for a lock after 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling PostgreSQL's view; no event to wait on
	}
}

// A stale writer whose check waits on a newer holder's open transaction is
// rejected once that transaction commits.
func testWaits(ctx context.Context, t *testing.T, db *sql.DB) {
	g, data := newGuard(ctx, t, db, "waits")
	if err := g.Exec(ctx, "job", 1, put(data, "x", "one", 1)); err != nil {
		t.Fatal(err)
	}
	newer, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Rollback()
	if err := g.Check(ctx, newer, "job", 3); err != nil {
		t.Fatal(err)
	}
	if err := put(data, "x", "three", 3)(newer); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Exec(ctx, "job", 2, put(data, "x", "two", 2)) }()
	awaitLockWait(ctx, t, db, done)
	if err := newer.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale writer after newer commit = %v; want ErrStaleToken", err)
	}
	if v := get(ctx, t, db, data, "x"); v != "three" {
		t.Fatalf("x = %q; want three", v)
	}

	// If the newer transaction rolls back, the waiting writer goes ahead.
	newer2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, newer2, "job", 9); err != nil {
		t.Fatal(err)
	}
	go func() { done <- g.Exec(ctx, "job", 4, put(data, "x", "four", 4)) }()
	awaitLockWait(ctx, t, db, done)
	if err := newer2.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer after rolled-back newer = %v", err)
	}
	if v := get(ctx, t, db, data, "x"); v != "four" {
		t.Fatalf("x = %q; want four", v)
	}

	// A rejected Check still locks the fence row until its transaction
	// ends (so the stored token it reports cannot change meanwhile).
	stale, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Rollback()
	if err := g.Check(ctx, stale, "job", 1); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Check(1) = %v; want ErrStaleToken", err)
	}
	go func() { done <- g.Exec(ctx, "job", 5, put(data, "x", "five", 5)) }()
	select {
	case err := <-done:
		t.Fatalf("writer did not wait for the rejected transaction's row lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := stale.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer after rejected transaction ended = %v", err)
	}
}

// 8 writers × 50 writes with random, interleaved tokens. Each write, inside its fenced
// transaction, moves a protected "state" row to its token and appends
// (token, previous state) to a log. The committed log, in its order, must
// chain (each entry's prev is the entry before's token) with
// non-decreasing tokens, and the final state and fence token equal the
// largest accepted token.
func testConcurrent(ctx context.Context, t *testing.T, db *sql.DB) {
	g, _ := newGuard(ctx, t, db, "conc")
	for _, q := range []string{
		"CREATE TABLE conc_state (id int PRIMARY KEY, token bigint NOT NULL)",
		"INSERT INTO conc_state VALUES (1, 0)",
		"CREATE TABLE conc_log (seq bigserial PRIMARY KEY, token bigint NOT NULL, prev bigint NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const writers, writes = 8, 50
	var (
		mu       sync.Mutex
		accepted []uint64
		rejected int
		wg       sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < writes; i++ {
				// Tokens rise with i, and writers overlap: many writes
				// are accepted, many rejected, some tie.
				tok := uint64(i)*4 + rand.Uint64N(16) + 1
				err := g.Exec(ctx, "conc", tok, func(tx *sql.Tx) error {
					var prev int64
					if err := tx.QueryRowContext(ctx, "UPDATE conc_state SET token = $1 FROM (SELECT token AS old FROM conc_state WHERE id = 1 FOR UPDATE) o WHERE id = 1 RETURNING o.old", int64(tok)).Scan(&prev); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "INSERT INTO conc_log (token, prev) VALUES ($1, $2)", int64(tok), prev)
					return err
				})
				mu.Lock()
				switch {
				case err == nil:
					accepted = append(accepted, tok)
				case errors.Is(err, fence.ErrStaleToken):
					rejected++
				default:
					t.Errorf("Exec(%d): %v", tok, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d accepted, %d rejected", len(accepted), rejected)
	if len(accepted)+rejected != writers*writes || len(accepted) == 0 || rejected == 0 {
		t.Fatalf("accepted %d, rejected %d of %d", len(accepted), rejected, writers*writes)
	}
	rows, err := db.QueryContext(ctx, "SELECT token, prev FROM conc_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	n := 0
	for rows.Next() {
		var tok, prev int64
		if err := rows.Scan(&tok, &prev); err != nil {
			t.Fatal(err)
		}
		if prev != last {
			t.Fatalf("log entry %d: prev %d, but the entry before set %d: log order is not commit order", n, prev, last)
		}
		if tok < prev {
			t.Fatalf("log entry %d: token %d committed after token %d", n, tok, prev)
		}
		last = tok
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(accepted) {
		t.Fatalf("log has %d entries; %d writes were accepted", n, len(accepted))
	}
	var max uint64
	for _, a := range accepted {
		max = maxU(max, a)
	}
	var state int64
	if err := db.QueryRowContext(ctx, "SELECT token FROM conc_state WHERE id = 1").Scan(&state); err != nil {
		t.Fatal(err)
	}
	if uint64(state) != max || uint64(last) != max {
		t.Fatalf("final state %d, last log %d; want the largest accepted token %d", state, last, max)
	}
	if tok, _, err := g.Token(ctx, "conc"); err != nil || tok != max {
		t.Fatalf("fence token %d, %v; want %d", tok, err, max)
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// Two baton holders of one lock: the first is "paused" past its TTL (the
// store's clock moves on), the second acquires with a larger token and
// writes; when the first resumes and writes with its old token, the fence
// rejects it.
func testPausedHolder(ctx context.Context, t *testing.T, db *sql.DB) {
	g, data := newGuard(ctx, t, db, "paused")
	storeClock := clocktest.NewFakeClock(time.Now())
	store := memstore.New(memstore.WithClock(storeClock))
	a, err := baton.NewMutex(store, "report", baton.WithIdentity("replica-a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := baton.NewMutex(store, "report", baton.WithIdentity("replica-b"))
	if err != nil {
		t.Fatal(err)
	}
	leaseA, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer leaseA.Unlock(ctx) // fails: the claim expired; it ends A's keeper
	// A checks its lease, and then pauses before writing.
	if leaseA.Err() != nil {
		t.Fatal("A's lease not valid")
	}
	tokenA := leaseA.Token()

	// Meanwhile the store sees A's claim expire and B takes the lock.
	storeClock.SetTime(storeClock.Now().Add(baton.DefaultTTL + time.Second))
	leaseB, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("B TryLock after A's claim expired: %v", err)
	}
	defer leaseB.Unlock(ctx)
	if leaseB.Token() <= tokenA {
		t.Fatalf("B's token %d not larger than A's %d", leaseB.Token(), tokenA)
	}
	if err := g.Exec(ctx, leaseB.Name(), leaseB.Token(), put(data, "report", "by B", leaseB.Token())); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	// A resumes and writes with its old token.
	err = g.Exec(ctx, leaseA.Name(), tokenA, put(data, "report", "by A (late)", tokenA))
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("A's late write = %v; want ErrStaleToken", err)
	}
	t.Log(err)
	if v := get(ctx, t, db, data, "report"); v != "by B" {
		t.Fatalf("report = %q; want by B", v)
	}
}

func testRunLog(ctx context.Context, t *testing.T, db *sql.DB) {
	if _, err := fence.NewRunLog(db, "bad name"); err == nil {
		t.Fatal("NewRunLog accepted an invalid table name")
	}
	rl, err := fence.NewRunLog(db, "runs_a")
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	claim := func(job string, slot time.Time, commit bool) bool {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := rl.Claim(ctx, tx, job, slot)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !claim("nightly", slot, false) {
		t.Fatal("first claim false")
	}
	if !claim("nightly", slot, true) {
		t.Fatal("claim after a rolled-back claim false")
	}
	if claim("nightly", slot, true) {
		t.Fatal("second claim of the same slot true")
	}
	// The same instant in another zone is the same slot.
	if claim("nightly", slot.In(time.FixedZone("X", 5*3600)), true) {
		t.Fatal("same slot in another zone claimed again")
	}
	if !claim("nightly", slot.Add(time.Hour), true) || !claim("hourly", slot, true) {
		t.Fatal("another slot or job could not be claimed")
	}
	if done, err := rl.Done(ctx, "nightly", slot); err != nil || !done {
		t.Fatalf("Done = %v, %v", done, err)
	}
	if done, err := rl.Done(ctx, "nightly", slot.Add(2*time.Hour)); err != nil || done {
		t.Fatalf("Done(unclaimed) = %v, %v", done, err)
	}
}

// Concurrent Exec of one slot: exactly one runs its work; a work error
// leaves the slot unclaimed.
func testRunLogConcurrent(ctx context.Context, t *testing.T, db *sql.DB) {
	rl, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if rl.Table() != fence.DefaultRunLogTable {
		t.Fatalf("Table = %q", rl.Table())
	}
	if err := rl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE rl_effects (n int)"); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	if ran, err := rl.Exec(ctx, "report", slot, func(*sql.Tx) error { return boom }); ran || err != boom {
		t.Fatalf("Exec with failing work = %v, %v", ran, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := rl.Exec(ctx, "report", slot, func(tx *sql.Tx) error {
				time.Sleep(10 * time.Millisecond) // hold the claim open a while
				_, err := tx.ExecContext(ctx, "INSERT INTO rl_effects VALUES (1)")
				return err
			})
			if err != nil {
				t.Errorf("Exec: %v", err)
			}
			if ok {
				mu.Lock()
				ran++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var effects int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM rl_effects").Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if ran != 1 || effects != 1 {
		t.Fatalf("work ran %d times, %d effects; want 1", ran, effects)
	}
}

func TestNewSQLGuardValidation(t *testing.T) {
	db := &sql.DB{} // never used: validation fails first or nothing is run
	for _, name := range []string{"", "1abc", "a-b", "a;drop", "x y", `"q"`, "a.b.c", strings.Repeat("a", 64), "s."} {
		if _, err := fence.NewSQLGuard(db, fence.WithTable(name)); err == nil {
			t.Errorf("table %q accepted", name)
		}
	}
	for _, name := range []string{"fence", "_f1", "app.fence", "Fence_Tokens", strings.Repeat("a", 63)} {
		g, err := fence.NewSQLGuard(db, fence.WithTable(name))
		if err != nil {
			t.Errorf("table %q: %v", name, err)
		} else if g.Table() != name {
			t.Errorf("Table() = %q", g.Table())
		}
	}
	if g, err := fence.NewSQLGuard(db); err != nil || g.Table() != fence.DefaultTable {
		t.Fatalf("default: %v, %v", g, err)
	}
	if g, err := fence.NewSQLGuard(db, nil); err != nil || g.Table() != fence.DefaultTable {
		t.Fatalf("a nil option: %v, %v; want it ignored", g, err)
	}
	if _, err := fence.NewSQLGuard(nil); err == nil {
		t.Fatal("nil db accepted")
	}
}
