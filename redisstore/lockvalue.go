package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// lockValue is a lock key's value, written by acquireScript:
//
//	<token> <ttl ms> <acquired ms> <nonce length> <nonce><holder>
//
// The last two parts are ownerArg(holder, nonce). A string with the expiry
// set in the same SET costs the server less than a hash and a PEXPIRE.
type lockValue struct {
	token         uint64
	ttl           time.Duration
	acquired      time.Time // the server's wall clock when acquired, for display
	holder, nonce string
}

// maxTokenDigits and maxToken match the scripts, which keep tokens exact
// in Lua's numbers (doubles: integers up to 2^53). Tokens follow the
// server's clock in microseconds (about 1.8e15 in 2026), which reaches
// 2^53 in the 23rd century.
const (
	maxTokenDigits = 16
	maxToken       = 1 << 53
)

// decodeLockValue parses a lock key's value. It accepts what the scripts
// accept and reports what is wrong otherwise.
func decodeLockValue(v string) (lockValue, error) {
	var parts [4]string
	rest := v
	for i := range 4 {
		var ok bool
		if parts[i], rest, ok = strings.Cut(rest, " "); !ok {
			return lockValue{}, fmt.Errorf("lock value %q has fewer than five space-separated parts", truncate(v))
		}
	}
	digits := func(what, s string, maxLen int) (uint64, error) {
		if s == "" || len(s) > maxLen || strings.Trim(s, "0123456789") != "" {
			return 0, fmt.Errorf("lock value %q: %s %q is not a number of at most %d digits", truncate(v), what, truncate(s), maxLen)
		}
		return strconv.ParseUint(s, 10, 64)
	}
	token, err := digits("token", parts[0], maxTokenDigits)
	if err != nil {
		return lockValue{}, err
	}
	if token > maxToken {
		return lockValue{}, fmt.Errorf("lock value %q: token %d is above 2^53, which the scripts cannot keep exact", truncate(v), token)
	}
	ttl, err := digits("ttl", parts[1], 12)
	if err != nil {
		return lockValue{}, err
	}
	acquired, err := digits("acquire time", parts[2], 15)
	if err != nil {
		return lockValue{}, err
	}
	n, err := digits("nonce length", parts[3], 6)
	if err != nil {
		return lockValue{}, err
	}
	if n < 1 || n >= uint64(len(rest)) {
		return lockValue{}, errors.New("lock value " + strconv.Quote(truncate(v)) + " does not hold a nonce of the stated length and a holder")
	}
	return lockValue{
		token: token, ttl: time.Duration(ttl) * time.Millisecond, acquired: time.UnixMilli(int64(acquired)),
		nonce: rest[:n], holder: rest[n:],
	}, nil
}

// truncate shortens s for an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
