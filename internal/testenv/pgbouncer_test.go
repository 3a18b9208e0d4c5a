package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Each pool mode's database reaches the PostgreSQL behind the PgBouncer,
// the admin console answers, and a restart keeps the port.
func TestPgBouncer(t *testing.T) {
	pg := StartPostgres(t)
	b := StartPgBouncer(t, pg, PgBouncerSetting("default_pool_size", "2"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := func(mode string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, b.DSN(mode, "default_query_exec_mode=simple_protocol"))
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, b.Log())
		}
		defer conn.Close(ctx)
		var port int
		if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if port != pg.Port {
			t.Fatalf("%s: served by port %d, want PostgreSQL's %d", mode, port, pg.Port)
		}
	}
	for _, mode := range PoolModes {
		query(mode)
	}
	b.Admin(ctx, "RECONNECT")
	b.Restart()
	query("transaction")
}
