//go:build linux || darwin

package filestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// The cross-process test re-executes the test binary; TestMain sends these
// children to helperMain.
const (
	helperDir    = "BATON_FILE_DIR"
	helperLog    = "BATON_FILE_LOG"
	helperRounds = "BATON_FILE_ROUNDS"
	helperKey    = "shared"
)

// TestCrossProcessExclusion runs several OS processes, each with its own
// Store on one directory, that acquire and release one lock in a loop. While
// holding it, each appends "start TOKEN PID" and later "end TOKEN PID" to a
// shared log (O_APPEND, one write per line) and renews once in between. The
// log must show no two holders overlapping and tokens 1, 2, 3, ... in order.
func TestCrossProcessExclusion(t *testing.T) {
	const procs, rounds = 4, 40
	dir := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "holders.log")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type child struct {
		cmd    *exec.Cmd
		output strings.Builder
	}
	children := make([]*child, procs)
	var starts []io.Closer
	for i := range children {
		c := &child{cmd: exec.CommandContext(ctx, exe, "-test.run=^$")}
		c.cmd.Env = append(os.Environ(), helperEnv+"=1", helperDir+"="+dir, helperLog+"="+logPath,
			fmt.Sprintf("%s=%d", helperRounds, rounds))
		c.cmd.Stdout, c.cmd.Stderr = &c.output, &c.output
		start, err := c.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer start.Close()
		children[i] = c
		starts = append(starts, start)
	}
	// Children wait for their stdin to close, so that all contend from the
	// first round on.
	for _, start := range starts {
		start.Close()
	}
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", i, err, c.output.String())
		}
	}
	if t.Failed() {
		return
	}

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		lines    int
		holding  bool
		curToken uint64
		curPID   int
		pids     = map[int]int{}
		switches int // tenures whose holder differs from the previous one
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var (
			what  string
			token uint64
			pid   int
		)
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d", &what, &token, &pid); err != nil {
			t.Fatalf("log line %d %q: %v", lines, sc.Text(), err)
		}
		switch {
		case what == "start" && !holding:
			if token != curToken+1 {
				t.Fatalf("log line %d: token %d follows token %d", lines, token, curToken)
			}
			if pid != curPID {
				switches++
			}
			holding, curToken, curPID = true, token, pid
			pids[pid]++
		case what == "end" && holding && token == curToken && pid == curPID:
			holding = false
		default:
			t.Fatalf("log line %d %q: holder %d with token %d has not ended (holding=%v): two holders overlapped",
				lines, sc.Text(), curPID, curToken, holding)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if holding || curToken != procs*rounds || len(pids) != procs {
		t.Fatalf("log has %d tenures by %d processes ending with token %d (holding=%v); want %d by %d",
			curToken, len(pids), curToken, holding, procs*rounds, procs)
	}
	rec, err := newStore(t, dir, nil).Get(context.Background(), helperKey)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token != procs*rounds || rec.Holder != "" {
		t.Errorf("final record %+v, want token %d and no holder", rec, procs*rounds)
	}
	t.Logf("%d processes, %d tenures (per process: %v), holder changed %d times", procs, curToken, pids, switches)
}

// helperMain is a child process of TestCrossProcessExclusion.
func helperMain() int {
	if err := helperRun(); err != nil {
		fmt.Fprintf(os.Stderr, "helper %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

func helperRun() error {
	var rounds int
	if _, err := fmt.Sscan(os.Getenv(helperRounds), &rounds); err != nil {
		return fmt.Errorf("%s: %w", helperRounds, err)
	}
	s, err := New(os.Getenv(helperDir))
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(os.Getenv(helperLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil { // the start signal
		return err
	}
	// Wake on changes where the platform can watch; otherwise (and as a
	// fallback) poll.
	changes, _ := s.Watch(ctx, helperKey)
	holder := fmt.Sprintf("proc-%d", os.Getpid())
	pid := os.Getpid()
	for done := 0; done < rounds; {
		g, err := s.TryAcquire(ctx, helperKey, backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: time.Minute})
		if errors.Is(err, backend.ErrHeld) {
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case _, ok := <-changes:
				if !ok {
					changes = nil
				}
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			t.Stop()
			continue
		}
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(logf, "start %d %d\n", g.Token, pid); err != nil {
			return err
		}
		if rec, err := s.Get(ctx, helperKey); err != nil || rec.Holder != holder || rec.Nonce != g.Nonce || rec.Token != g.Token || !rec.Held() {
			return fmt.Errorf("holding token %d, Get = %+v, %v", g.Token, rec, err)
		}
		if _, err := s.Renew(ctx, g); err != nil {
			return fmt.Errorf("renew token %d: %w", g.Token, err)
		}
		if _, err := fmt.Fprintf(logf, "end %d %d\n", g.Token, pid); err != nil {
			return err
		}
		if err := s.Release(ctx, g); err != nil {
			return fmt.Errorf("release token %d: %w", g.Token, err)
		}
		done++
		// Let the others in now and then: a process that has just released
		// would otherwise usually win the next round too, while the others
		// are still waking up.
		if rand.N(2) == 0 {
			time.Sleep(rand.N(2 * time.Millisecond))
		}
	}
	return nil
}
