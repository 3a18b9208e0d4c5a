package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// missingInterpreter explains the "no such file or directory" of a CMD
// that exists: the interpreter its #! line names does not (a script saved
// with Windows line endings names "/bin/sh\r"), or, for a program, the
// dynamic loader it was linked for. It returns "" if CMD is not found or
// is neither.
func missingInterpreter(name string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if rest, ok := bytes.CutPrefix(head, []byte("#!")); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		interp, _, _ := strings.Cut(strings.TrimLeft(string(line), " \t"), " ")
		if strings.HasSuffix(interp, "\r") {
			return fmt.Sprintf("%s exists, but its #! line ends with a carriage return, so the interpreter it names is %q, which does not exist: the file has Windows line endings; convert it (dos2unix %s)", path, interp, path)
		}
		return fmt.Sprintf("%s exists, but the interpreter its #! line names, %q, does not", path, interp)
	}
	if bytes.HasPrefix(head, []byte("\x7fELF")) {
		return fmt.Sprintf("%s exists, but the dynamic loader it was linked for does not: it was built for another system (another C library, such as musl or glibc, or another architecture)", path)
	}
	return ""
}

// pathHint shows the $PATH a command name was looked up in: cron's and a
// service manager's are minimal (/usr/bin:/bin), so a command found in a
// login shell may not be found there.
func pathHint() string {
	path, ok := os.LookupEnv("PATH")
	if !ok {
		return "$PATH is not set: give CMD's full path, or set PATH"
	}
	return fmt.Sprintf("$PATH is %q (cron and service managers set a short one): give CMD's full path, or set PATH", path)
}
