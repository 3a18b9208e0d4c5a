package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// TestNewerFormatNotCorrupt: a record, epoch file or floor file of a newer
// format version (a newer baton wrote it: a rollback meets one) is refused
// and kept, as before, but the error says who wrote it and to run that
// version, and that the file must not be deleted or rewritten; it said
// 'corrupt lock record' and how to delete it, which on a rollback loses
// a newer version's claim. A file of an unknown older version is still a
// corrupt one, with its fix.
func TestNewerFormatNotCorrupt(t *testing.T) {
	for _, c := range []struct{ name, file, content, fix string }{
		{"record", "job.json", `{"version":2,"key":"job","token":99}`, "delete it once no process uses the lock"},
		{"epoch", "job.epoch", `{"version":2,"key":"job","epoch":1}`, ""},
		{"floor", floorName, `{"version":2,"token":99}`, "write it again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for v, newer := range map[string]bool{"2": true, "0": false} {
				dir := t.TempDir()
				s := newStore(t, dir, nil)
				if c.name == "epoch" {
					// An epoch file is read when the record must be created.
					mustAcquire(t, s, "other", req("a", "n", time.Minute))
				}
				path := filepath.Join(dir, c.file)
				content := strings.Replace(c.content, `"version":2`, `"version":`+v, 1)
				if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := s.TryAcquire(bg, "job", req("x", "y", time.Minute))
				if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), path) {
					t.Fatalf("version %s: TryAcquire: %v; want ErrCorruptRecord naming %s", v, err, path)
				}
				msg := err.Error()
				if said := strings.Contains(msg, "newer version of baton") && strings.Contains(msg, "do not delete"); said != newer {
					t.Errorf("version %s: error %q; says a newer version wrote it: %v, want %v", v, msg, said, newer)
				}
				if fix := strings.Contains(msg, c.fix); c.fix != "" && fix == newer {
					t.Errorf("version %s: error %q; gives the corrupt file's fix %q: %v, want %v", v, msg, c.fix, fix, !newer)
				}
				if got := string(readBytes(t, path)); got != content {
					t.Fatalf("version %s: the file was rewritten to %q", v, got)
				}
			}
		})
	}
}
