package etcdstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// valueVersion is the first field of every value the Store writes.
const valueVersion = "baton/v1"

// value is what a claim, a /last record and a queue entry hold:
//
//	baton/v1 holder=<holder> nonce=<nonce> ttl=<duration> at=<time>
//
// on one line, fields separated by one space, in this order: the holder
// identity and the nonce of the acquisition (neither may contain white
// space or be empty), the TTL the holder asked for in Go's duration syntax
// ("15s", "1.5s"), and the wall-clock time of the acquisition (or of the
// enqueue, for a queue entry and a claim handed over from it) in RFC 3339
// with nanoseconds, UTC. The time is for people reading `etcdctl get` or
// `baton status`; baton never compares it with a clock. The fencing token
// is not in the value: it is the claim's mod revision, kept by etcd. A
// queue entry's value is followed by handoffMark.
type value struct {
	holder, nonce string
	ttl           time.Duration
	at            time.Time
}

func (v value) encode() string {
	return valueVersion +
		" holder=" + v.holder +
		" nonce=" + v.nonce +
		" ttl=" + v.ttl.String() +
		" at=" + v.at.UTC().Format(time.RFC3339Nano)
}

var errBadValue = errors.New("not a baton/v1 value")

// errNewerValue marks a value of a later format (baton/v2 and up): a newer
// baton wrote it. It is refused like a bad value, but it is not one, so
// its error must not tell anyone to delete the key.
var errNewerValue = errors.New("written by a newer version of baton")

// newerVersion reports whether first, a value's first field, names a
// format after valueVersion.
func newerVersion(first string) bool {
	n, ok := strings.CutPrefix(first, "baton/v")
	v, err := strconv.Atoi(n)
	return ok && err == nil && v > 1
}

// decodeValue parses what encode wrote. Any deviation is an error: the
// Store never guesses at a value it did not write.
func decodeValue(b []byte) (value, error) {
	f := strings.Split(string(b), " ")
	if newerVersion(f[0]) {
		return value{}, fmt.Errorf("%w: %w (format %s; this one reads %s): %q", errBadValue, errNewerValue, f[0], valueVersion, truncate(string(b)))
	}
	if len(f) != 5 || f[0] != valueVersion {
		return value{}, fmt.Errorf("%w: %q", errBadValue, truncate(string(b)))
	}
	field := func(i int, name string) (string, error) {
		v, ok := strings.CutPrefix(f[i], name+"=")
		if !ok || v == "" {
			return "", fmt.Errorf("%w: field %d is %q, want %s=...", errBadValue, i, truncate(f[i]), name)
		}
		return v, nil
	}
	var (
		v   value
		err error
		s   string
	)
	if v.holder, err = field(1, "holder"); err != nil {
		return value{}, err
	}
	if v.nonce, err = field(2, "nonce"); err != nil {
		return value{}, err
	}
	if s, err = field(3, "ttl"); err != nil {
		return value{}, err
	}
	if v.ttl, err = time.ParseDuration(s); err != nil || v.ttl <= 0 {
		return value{}, fmt.Errorf("%w: ttl %q is not a positive duration", errBadValue, truncate(s))
	}
	if s, err = field(4, "at"); err != nil {
		return value{}, err
	}
	if v.at, err = time.Parse(time.RFC3339Nano, s); err != nil {
		return value{}, fmt.Errorf("%w: at %q is not an RFC 3339 time", errBadValue, truncate(s))
	}
	return v, nil
}

// handoffMark ends the value of a queue entry whose Store collects a claim
// handed to it by the releasing transaction (see "Fair mode" in the package
// documentation). The claim it is handed holds the entry's value without
// the mark, verbatim, so that the waiter's Store recognizes it (and can
// delete it, conditionally on that value, if the waiter gave up).
const handoffMark = " handoff=1"

// handedValue returns the claim value that the queue entry value q takes
// when the lock is handed to it, or false if the entry does not take
// handoffs (not written by a Store that collects them).
func handedValue(q []byte) (string, bool) {
	v, ok := strings.CutSuffix(string(q), handoffMark)
	if !ok {
		return "", false
	}
	if _, err := decodeValue([]byte(v)); err != nil {
		return "", false
	}
	return v, true
}

// checkToken reports whether s can be a holder or nonce in a value: not
// empty, printable, no white space.
func checkToken(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%s %q contains the character %q; use printable characters without spaces", what, truncate(s), r)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
