package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is one run of a server process (redis-server, etcd, postgres).
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited and its log is drained
	log    *syncBuffer
}

// startProc starts cmd, whose log the caller has piped to out, and copies
// that log into the proc's. If readyLine is not empty, ready is closed at
// the first log line that contains it.
func startProc(cmd *exec.Cmd, out io.Reader, readyLine string) (p *proc, ready <-chan struct{}, err error) {
	if err := startProcess(cmd); err != nil {
		return nil, nil, err
	}
	p = &proc{cmd: cmd, exited: make(chan struct{}), log: &syncBuffer{}}
	rc := make(chan struct{})
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := readyLine == ""
		for sc.Scan() {
			line := sc.Text()
			p.log.WriteString(line + "\n")
			if !signalled && strings.Contains(line, readyLine) {
				signalled = true
				close(rc)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	return p, rc, nil
}

// awaitReady waits for ready. If p exits first, or after timeout (p is
// then killed), it returns an error that quotes the end of p's log.
func (p *proc) awaitReady(name string, ready <-chan struct{}, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("%s exited before it was ready: %s", name, lastLines(p.log.String(), 8))
	case <-timer.C:
		p.kill()
		return fmt.Errorf("%s not ready after %v: %s", name, timeout, lastLines(p.log.String(), 8))
	}
}

// hasExited reports whether p has exited.
func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill kills p and waits for it to exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop sends sig to p and waits for it to exit; after timeout, if it is
// positive, it kills p.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	if timeout <= 0 {
		<-p.exited
		return
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		p.kill()
	}
}
