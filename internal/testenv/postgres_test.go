package testenv_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-go/baton/internal/testenv"
)

func TestStartPostgres(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresArgs("-c", "application_name=testenv"))
	if !pg.Running() {
		t.Fatal("not running after StartPostgres")
	}
	if !strings.Contains(pg.DSN(), pg.Addr()) {
		t.Fatalf("DSN %q does not name %s", pg.DSN(), pg.Addr())
	}
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatalf("query: %v\nlog:\n%s", err, pg.Log())
	}
	if !strings.HasPrefix(version, "PostgreSQL") {
		t.Fatalf("version() = %q", version)
	}
	var fsync string
	if err := db.QueryRowContext(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("fsync = %q, %v; want off", fsync, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if pg.Running() {
		t.Fatal("running after Stop")
	}
	pg.Start()
	db2, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if err := db2.PingContext(ctx); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	t.Logf("%s on %s (dir %s)", version, pg.Addr(), pg.Dir)
}
