package redisstore

import (
	"testing"
	"time"
)

func TestParseNotice(t *testing.T) {
	for _, c := range []struct {
		in   string
		want notice
	}{
		{"acquired 7", notice{kind: noticeAcquired}},
		{"released 7", notice{}},
		{"released 7 500 contender-3", notice{reservedFor: "contender-3", window: 500 * time.Millisecond}},
		{"released 7 500 holder with spaces", notice{reservedFor: "holder with spaces", window: 500 * time.Millisecond}},
		{"handed 8 15000 3 abcholder b", notice{kind: noticeHanded, token: 8, ttl: 15 * time.Second, owner: "3 abcholder b", holder: "holder b"}},
		// Unknown or damaged notices wake every watch.
		{"released 7 0 x", notice{}},
		{"released 7 abc x", notice{}},
		{"released 7 500", notice{}},
		{"released 7 500 ", notice{}},
		{"handed 8 15000 3 abc", notice{}}, // no holder after the nonce
		{"handed 8 0 3 abcholder", notice{}},
		{"handed 0 15000 3 abcholder", notice{}},
		{"handed x 15000 3 abcholder", notice{}},
		{"handed 8 15000", notice{}},
		{"something else", notice{}},
		{"", notice{}},
	} {
		if got := parseNotice(c.in); got != c.want {
			t.Errorf("parseNotice(%q) = %+v; want %+v", c.in, got, c.want)
		}
	}
}
