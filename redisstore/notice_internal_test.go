package redisstore

import (
	"testing"
	"time"
)

func TestParseNotice(t *testing.T) {
	for _, c := range []struct {
		in       string
		acquired bool
		reserved string
		window   time.Duration
	}{
		{"acquired 7", true, "", 0},
		{"released 7", false, "", 0},
		{"released 7 500 contender-3", false, "contender-3", 500 * time.Millisecond},
		{"released 7 500 holder with spaces", false, "holder with spaces", 500 * time.Millisecond},
		// Unknown or damaged notices wake every watch.
		{"released 7 0 x", false, "", 0},
		{"released 7 abc x", false, "", 0},
		{"released 7 500", false, "", 0},
		{"released 7 500 ", false, "", 0},
		{"something else", false, "", 0},
		{"", false, "", 0},
	} {
		acquired, reserved, window := parseNotice(c.in)
		if acquired != c.acquired || reserved != c.reserved || window != c.window {
			t.Errorf("parseNotice(%q) = %v, %q, %v; want %v, %q, %v", c.in, acquired, reserved, window, c.acquired, c.reserved, c.window)
		}
	}
}
