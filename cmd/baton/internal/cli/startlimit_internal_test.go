package cli

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// A CMD or watchdog that could not be started because of a limit (the
// process limit: fork answers EAGAIN; open files: pipe2 answers EMFILE)
// exits 126 with the limit named and how to raise it, not a bare
// "resource temporarily unavailable" or "too many open files".
func TestStartErrorNamesLimit(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"fork":  {&fs.PathError{Op: "fork/exec", Path: "/usr/bin/echo", Err: syscall.EAGAIN}, "ulimit -u"},
		"pipe":  {&fs.PathError{Op: "pipe2", Path: "", Err: syscall.EMFILE}, "ulimit -n"},
		"table": {&fs.PathError{Op: "pipe2", Path: "", Err: syscall.ENFILE}, "fs.file-max"},
	}
	for name, c := range cases {
		err := startError("echo", c.err)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitCannotRun || !errors.Is(err, c.err.(*fs.PathError).Err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want exit %d naming %q", name, err, ExitCannotRun, c.want)
		}
	}
}
