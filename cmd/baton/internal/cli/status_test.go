package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/cmd/baton/internal/cli"
)

// statusFixture makes a store with lock "alpha" held by holder-a (token 1)
// and lock "beta" released (token 2, after two terms).
func statusFixture(t *testing.T) (dir string, alpha *baton.Lease) {
	t.Helper()
	dir = t.TempDir()
	st := openStore(t, dir)
	ctx := context.Background()
	ma, err := baton.NewMutex(st, "alpha", baton.WithIdentity("holder-a"), baton.WithTTL(time.Minute), baton.WithRenewDeadline(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	alpha, err = ma.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alpha.Unlock(context.Background()) })
	mb, err := baton.NewMutex(st, "beta", baton.WithIdentity("holder-b"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		l, err := mb.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return dir, alpha
}

// transitions returns the store's transition count of lock name.
func transitions(t *testing.T, dir, name string) string {
	t.Helper()
	r, err := openStore(t, dir).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(r.Transitions, 10)
}

// tableRows parses a status table into its rows of fields.
func tableRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestStatusTable(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t)
	code, out, stderr := runCLI(t, "status", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	rows := tableRows(t, out)
	if got := strings.Join(rows[0], " "); got != "NAME HOLDER TOKEN RENEWED EXPIRES-IN TRANSITIONS" {
		t.Fatalf("header %q", got)
	}
	if len(rows) != 3 {
		t.Fatalf("want 2 locks:\n%s", out)
	}
	// alpha  holder-a  1  12ms ago  59.9s  1
	a := rows[1]
	if len(a) != 7 || a[0] != "alpha" || a[1] != "holder-a" || a[2] != "1" || a[4] != "ago" || a[6] != transitions(t, dir, "alpha") {
		t.Errorf("alpha row %q", a)
	}
	if d, err := time.ParseDuration(a[5]); err != nil || d <= 50*time.Second || d > time.Minute {
		t.Errorf("alpha EXPIRES-IN %q, want about 1m", a[5])
	}
	// beta  <none>  2  5ms ago  -  2
	b := rows[2]
	if len(b) != 7 || b[0] != "beta" || b[1] != "<none>" || b[2] != "2" || b[5] != "-" || b[6] != transitions(t, dir, "beta") {
		t.Errorf("beta row %q", b)
	}

	code, out, _ = runCLI(t, "status", "alpha", "-o", "wide", "--dir", dir)
	rows = tableRows(t, out)
	if code != 0 || len(rows) != 2 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	if got := strings.Join(rows[0], " "); got != "NAME HOLDER TOKEN RENEWED EXPIRES-IN TRANSITIONS TTL ACQUIRED VERSION" {
		t.Fatalf("wide header %q", got)
	}
	if r := rows[1]; len(r) < 10 || r[0] != "alpha" || r[7] != "60s" || r[10] != "-" {
		t.Errorf("wide row %q", r)
	}
}

// A record's times written by a clock ahead of this machine's (a holder
// on another machine, here written by hand) show how far ahead they are,
// not "0ms ago", which hid the offset between the clocks.
func TestStatusTimesAheadOfThisClock(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t)
	path := filepath.Join(dir, "beta.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(5*time.Minute + 30*time.Second).UTC().Format(time.RFC3339Nano)
	rec["acquire_time"], rec["renew_time"] = ahead, ahead
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "status", "beta", "--dir", dir, "-o", "wide")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	// NAME HOLDER TOKEN RENEWED EXPIRES-IN TRANSITIONS TTL ACQUIRED VERSION
	// beta <none> 2 in 5m29s - 1 15s in 5m29s -
	rows := tableRows(t, out)
	if len(rows) != 2 || len(rows[1]) != 11 || rows[1][3] != "in" || rows[1][8] != "in" ||
		!regexp.MustCompile(`^5m[0-9]+s$`).MatchString(rows[1][4]) || rows[1][9] != rows[1][4] {
		t.Fatalf("status -o wide = %q, want RENEWED and ACQUIRED \"in 5m...s\"", out)
	}
}

func TestStatusJSONAndYAML(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t)

	code, out, stderr := runCLI(t, "status", "alpha", "-o", "json", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	var one cli.LockStatus
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if one.Name != "alpha" || !one.Held || one.Holder != "holder-a" || one.Token != 1 || one.TTLSeconds != 60 ||
		one.ExpiresInSeconds <= 50 || strconv.FormatUint(one.Transitions, 10) != transitions(t, dir, "alpha") || one.AcquireTime == nil || one.RenewTime == nil {
		t.Errorf("json: %+v", one)
	}
	// Seconds to the millisecond: at most three decimals.
	if m := regexp.MustCompile(`"expiresInSeconds": ?[0-9]+\.[0-9]{4,}`).FindString(out); m != "" {
		t.Errorf("json: %s: want milliseconds at most", m)
	}
	for _, key := range []string{`"name"`, `"held"`, `"holder"`, `"token"`, `"ttlSeconds"`, `"expiresInSeconds"`, `"acquireTime"`, `"renewTime"`, `"transitions"`} {
		if !strings.Contains(out, key) {
			t.Errorf("json lacks %s:\n%s", key, out)
		}
	}

	code, out, _ = runCLI(t, "status", "-o", "yaml", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var list cli.LockStatusList
	if err := yaml.UnmarshalStrict([]byte(out), &list); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "alpha" || list.Items[1].Name != "beta" {
		t.Fatalf("yaml: %+v", list)
	}
	if b := list.Items[1]; b.Held || b.Holder != "" || b.Token != 2 || b.ExpiresInSeconds != 0 || strconv.FormatUint(b.Transitions, 10) != transitions(t, dir, "beta") {
		t.Errorf("yaml beta: %+v", b)
	}
	if !strings.Contains(out, "items:\n- ") || !strings.Contains(out, "holder: holder-a\n") {
		t.Errorf("yaml:\n%s", out)
	}

	code, out, _ = runCLI(t, "status", "-o", "json", "--dir", dir)
	list = cli.LockStatusList{}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Items) != 2 {
		t.Errorf("json list: exit code %d, %v:\n%s", code, err, out)
	}
}

func TestStatusUnknownLock(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t)
	code, out, stderr := runCLI(t, "status", "gamma", "--dir", dir)
	if code != 1 || out != "" {
		t.Fatalf("exit code %d, stdout %q", code, out)
	}
	if want := `baton: lock "gamma" not found in file store ` + dir; !strings.HasPrefix(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	code, _, stderr = runCLI(t, "status", "gamma", "--dir", dir+"/missing")
	if code != 1 || !strings.Contains(stderr, `lock "gamma" not found`) {
		t.Errorf("missing dir: exit code %d, stderr %q", code, stderr)
	}
	code, out, _ = runCLI(t, "status", "--dir", dir+"/missing")
	if code != 0 || !strings.Contains(out, "No locks in") {
		t.Errorf("missing dir, all locks: exit code %d, stdout %q", code, out)
	}
}

func TestStatusWatch(t *testing.T) {
	t.Parallel()
	dir, alpha := statusFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	go func() { done <- cli.Main(ctx, []string{"status", "--watch", "--dir", dir}, nil, out, errb) }()
	out.waitFor(t, "holder-a", 10*time.Second)

	// A release is printed at once (watch, not the 1s poll).
	if err := alpha.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "\n\nNAME", 10*time.Second)
	tables := strings.Split(out.String(), "\n\n")
	if last := tableRows(t, tables[len(tables)-1]); len(last) != 3 || last[1][0] != "alpha" || last[1][1] != "<none>" {
		t.Errorf("after release:\n%s", out)
	}

	// A new lock shows up.
	mg, err := baton.NewMutex(openStore(t, dir), "gamma", baton.WithIdentity("holder-g"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := mg.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Unlock(context.Background())
	out.waitFor(t, "holder-g", 10*time.Second)

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d; stderr: %s", code, errb)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not stop when its context ended")
	}
}

func TestStatusWatchJSONOneLock(t *testing.T) {
	t.Parallel()
	dir, alpha := statusFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"status", "alpha", "-w", "-o", "json", "--dir", dir}, nil, out, newSyncBuffer())
	}()
	out.waitFor(t, `"holder": "holder-a"`, 10*time.Second)
	if err := alpha.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, `"held": false`, 10*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit code %d", code)
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var docs []cli.LockStatus
	for dec.More() {
		var s cli.LockStatus
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, s)
	}
	if len(docs) != 2 || !docs[0].Held || docs[1].Held {
		t.Errorf("watch printed %d documents: %+v", len(docs), docs)
	}
}

// A record that does not decode: status, lock and doctor name the file and
// the fix, and the fix works: once the file is deleted, the lock is taken
// again with a token larger than any before.
func TestCorruptRecordFix(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t) // beta: released at token 2
	path := filepath.Join(dir, "beta.json")
	if err := os.WriteFile(path, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	const fix = "delete it once no process uses the lock"
	for _, args := range [][]string{{"status", "--dir", dir, "beta"}, {"status", "--dir", dir}, {"lock", "--dir", dir, "--wait", "0", "--name", "beta", "--", "true"}} {
		code, _, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, fix) {
			t.Errorf("%v: exit %d, want 1 naming %s and the fix:\n%s", args, code, path, stderr)
		}
	}
	code, out, _ := runCLI(t, "doctor", "--dir", dir, "--name", "beta")
	if got := doctorTable(t, out)["store"]; code != 1 || !strings.HasPrefix(got.detail, "corrupt lock record: ") || !strings.Contains(out, "never overwrites a record it cannot read") {
		t.Errorf("doctor: exit %d, store row %+v:\n%s", code, got, out)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "lock", "--wait", "0", "--dir", dir, "--name", "beta", "--", "sh", "-c", "echo $BATON_TOKEN")
	if token, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64); code != 0 || err != nil || token <= 2 {
		t.Errorf("lock after the fix: exit %d, token %q, want one above 2:\n%s", code, out, stderr)
	}
}

// A record of a newer format (a rollback meets one): doctor's fix does
// not tell to remove it, as the error says not to; it said 'remove it as
// the error says' for every unreadable record.
func TestNewerRecordDoctorFix(t *testing.T) {
	t.Parallel()
	dir, _ := statusFixture(t) // beta: released at token 2
	path := filepath.Join(dir, "beta.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(`"version":1`), []byte(`"version":2`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "doctor", "--dir", dir, "--name", "beta")
	fix, _, _ := strings.Cut(out[strings.Index(out, "Fixes:"):], "baton:")
	if code != 1 || !strings.Contains(out, "newer version of baton") || strings.Contains(fix, "remove it as the error says") || !strings.Contains(fix, "newer baton") {
		t.Errorf("doctor on a newer record: exit %d, want 1, the error's cause, and a fix that does not say to remove it:\n%s", code, out)
	}
}
