//go:build unix

package storeerr_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
)

// A dial that fails because this process has no descriptor left (socket
// answers EMFILE) is the client's limit, not an absent server: the hint
// names ulimit -n, not the address. It said "check the address and that
// the server runs" to a process holding many locks under a low ulimit -n.
func TestOutOfDescriptors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(f.Fd()) // the lowest free descriptor: the next one fails
	f.Close()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	_, err = net.Dial("tcp", l.Addr().String())
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	got := storeerr.Classify(err)
	if !errors.Is(got, syscall.EMFILE) {
		t.Fatalf("Dial under the lowered limit: %v, want EMFILE", err)
	}
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "ulimit -n") || strings.Contains(got.Error(), "check the address") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable naming ulimit -n, not the address", err, got)
	}
}
