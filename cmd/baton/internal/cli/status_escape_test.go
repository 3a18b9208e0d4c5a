package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
)

// A holder written to the store by another program (a Lease's
// holderIdentity, a Redis value, here a file record) may hold control
// characters: the status table shows them escaped, so that they neither
// drive the operator's terminal nor add a row that shows the lock free.
func TestStatusEscapesHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	holder := "evil\x1b]0;title\a\x1b[2J\nnightly\t<none>\t7"
	if _, err := st.TryAcquire(context.Background(), "nightly", backend.Request{Holder: holder, Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, output := range [][]string{nil, {"-o", "wide"}} {
		code, out, stderr := runCLI(t, append([]string{"status", "--dir", dir}, output...)...)
		if code != 0 || strings.ContainsAny(out, "\x1b\a\t") || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"evil\x1b]0;title\a\x1b[2J\nnightly\t<none>\t7"`) {
			t.Errorf("status %s with control characters in the holder: exit %d, stderr %s, output (want them escaped, two lines):\n%q", output, code, stderr, out)
		}
	}
}
