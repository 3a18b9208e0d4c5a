package redisstore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLockValueRoundTrip(t *testing.T) {
	for _, l := range []lockValue{
		{token: 1, ttl: 10 * time.Second, acquired: time.UnixMilli(1764500000123), holder: "pod-a", nonce: "0123abcd"},
		// Spaces and digits in holder and nonce: the nonce's length keeps the split unambiguous.
		{token: 999999999999999, ttl: time.Millisecond, acquired: time.UnixMilli(0), holder: "1 2 3", nonce: "a b"},
		{token: 7, ttl: time.Hour, acquired: time.UnixMilli(1), holder: "h\nx", nonce: "9 "},
	} {
		got, err := decodeLockValue(l.String())
		if err != nil {
			t.Errorf("decode(%q): %v", l.String(), err)
			continue
		}
		if got.token != l.token || got.ttl != l.ttl || !got.acquired.Equal(l.acquired) || got.holder != l.holder || got.nonce != l.nonce {
			t.Errorf("decode(%q) = %+v, want %+v", l.String(), got, l)
		}
	}
}

func TestDecodeLockValueRejects(t *testing.T) {
	for _, v := range []string{
		"", "x", "1 2 3", "1 2 3 4", // too few parts
		"1 2 3 0 h",     // empty nonce
		"1 2 3 5 nonce", // no holder after the nonce
		"1 2 3 9 short", // nonce longer than the rest
		"-1 2 3 1 nh", "1 +2 3 1 nh", "1 2 x 1 nh", "1 2 3 x nh",
		"9007199254740993 2 3 1 nh",  // token beyond Lua's exact integers (2^53)
		"12345678901234567 2 3 1 nh", // 17 digits
	} {
		if l, err := decodeLockValue(v); err == nil {
			t.Errorf("decode(%q) = %+v, want an error", v, l)
		}
	}
}

// FuzzDecodeLockValue: any bytes decode to a value or an error, never a
// panic, and a decoded value encodes to a string that decodes the same.
func FuzzDecodeLockValue(f *testing.F) {
	f.Add("1 10000 1764500000123 8 0123abcdpod-a")
	f.Add("15 1 2 3 a bholder with spaces")
	f.Add("1 2 3 99999999 x")
	f.Fuzz(func(t *testing.T, v string) {
		l, err := decodeLockValue(v)
		if err != nil {
			if !strings.Contains(err.Error(), "lock value") {
				t.Errorf("error %q does not say what it read", err)
			}
			return
		}
		if l.holder == "" || l.nonce == "" {
			t.Errorf("decode(%q) accepted an empty holder or nonce: %+v", v, l)
		}
		again, err := decodeLockValue(l.String())
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", l.String(), err)
		}
		if again != l {
			t.Errorf("decode(encode(%+v)) = %+v", l, again)
		}
	})
}

// String encodes l as acquireScript does; only tests need it in Go.
func (l lockValue) String() string {
	return fmt.Sprintf("%d %d %d %s", l.token, l.ttl.Milliseconds(), l.acquired.UnixMilli(), ownerArg(l.holder, l.nonce))
}
