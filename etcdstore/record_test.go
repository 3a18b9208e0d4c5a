package etcdstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

func TestValueRoundTrip(t *testing.T) {
	at := time.Date(2025, 11, 30, 5, 22, 1, 123456789, time.UTC)
	v := value{holder: "web-7f9c-1a2b", nonce: "9f86d081884c7d65", ttl: 1500 * time.Millisecond, at: at}
	enc := v.encode()
	want := "baton/v1 holder=web-7f9c-1a2b nonce=9f86d081884c7d65 ttl=1.5s at=2025-11-30T05:22:01.123456789Z"
	if enc != want {
		t.Fatalf("encode = %q, want %q", enc, want)
	}
	got, err := decodeValue([]byte(enc))
	if err != nil {
		t.Fatalf("decode(%q): %v", enc, err)
	}
	if got.holder != v.holder || got.nonce != v.nonce || got.ttl != v.ttl || !got.at.Equal(at) {
		t.Fatalf("decode = %+v, want %+v", got, v)
	}
}

func TestDecodeValueRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"foo",
		"baton/v2 holder=a nonce=b ttl=1s at=2025-11-30T05:22:01Z",
		"baton/v1 holder=a nonce=b ttl=1s",
		"baton/v1 holder=a nonce=b ttl=1s at=2025-11-30T05:22:01Z extra=1",
		"baton/v1 holder= nonce=b ttl=1s at=2025-11-30T05:22:01Z",
		"baton/v1 nonce=b holder=a ttl=1s at=2025-11-30T05:22:01Z",
		"baton/v1 holder=a nonce=b ttl=0s at=2025-11-30T05:22:01Z",
		"baton/v1 holder=a nonce=b ttl=-1s at=2025-11-30T05:22:01Z",
		"baton/v1 holder=a nonce=b ttl=soon at=2025-11-30T05:22:01Z",
		"baton/v1 holder=a nonce=b ttl=1s at=yesterday",
		"baton/v1  holder=a nonce=b ttl=1s at=2025-11-30T05:22:01Z",
	} {
		if v, err := decodeValue([]byte(s)); !errors.Is(err, errBadValue) {
			t.Errorf("decode(%q) = %+v, %v; want an error matching errBadValue", s, v, err)
		}
	}
}

func FuzzDecodeValue(f *testing.F) {
	f.Add("baton/v1 holder=a nonce=b ttl=1s at=2025-11-30T05:22:01Z")
	f.Add("baton/v1 holder=a nonce=b ttl=1s at=x")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := decodeValue([]byte(s))
		if err != nil {
			return
		}
		// What decodes re-encodes to a value that decodes the same.
		again, err := decodeValue([]byte(v.encode()))
		if err != nil || again.holder != v.holder || again.nonce != v.nonce || again.ttl != v.ttl || !again.at.Equal(v.at) {
			t.Fatalf("%q decodes to %+v, which re-encodes to %q: %+v, %v", s, v, v.encode(), again, err)
		}
	})
}

func TestCheckRequest(t *testing.T) {
	ok := backend.Request{Holder: "h", Nonce: "n", TTL: time.Second}
	if err := checkRequest("x", ok); err != nil {
		t.Fatalf("checkRequest(%+v): %v", ok, err)
	}
	for _, r := range []backend.Request{
		{Holder: "", Nonce: "n", TTL: time.Second},
		{Holder: "a b", Nonce: "n", TTL: time.Second},
		{Holder: "h", Nonce: "", TTL: time.Second},
		{Holder: "h", Nonce: "n\n", TTL: time.Second},
		{Holder: "h", Nonce: "n", TTL: 0},
	} {
		if err := checkRequest("x", r); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("checkRequest(%+v) = %v; want ErrInvalidOptions naming the lock", r, err)
		}
	}
}

// TestLeaseTiming: the lease outlives a claim renewed at any moment by at
// least the keepalive period plus a round trip budget of the same size, so
// that Renew can be answered from the last acknowledged keepalive.
func TestLeaseTiming(t *testing.T) {
	for _, ttl := range []time.Duration{
		time.Second, 1500 * time.Millisecond, 2 * time.Second, 2600 * time.Millisecond,
		15 * time.Second, 30 * time.Second, time.Hour,
	} {
		sec, every, verify := leaseTiming(ttl)
		l := time.Duration(sec) * time.Second
		if l-ttl < 2*every || every < minHeadroom/2 {
			t.Errorf("TTL %v: lease %v, keepalive every %v: want lease >= TTL + 2*every and every >= %v", ttl, l, every, minHeadroom/2)
		}
		if l-ttl > max(ttl/10, minHeadroom)+time.Second {
			t.Errorf("TTL %v: lease %v has more headroom than max(TTL/10, %v) plus rounding", ttl, l, minHeadroom)
		}
		if every > maxEvery {
			t.Errorf("TTL %v: keepalive every %v, more than %v (see trust.go)", ttl, every, maxEvery)
		}
		if verify < every || verify < ttl/3 {
			t.Errorf("TTL %v: verify every %v, want at least max(TTL/3, %v)", ttl, verify, every)
		}
	}
	if sec, every, _ := leaseTiming(15 * time.Second); sec != 17 || every != time.Second {
		t.Errorf("default TTL 15s: lease %ds, keepalive every %v; want 17s and 1s", sec, every)
	}
}

func TestConfigValidate(t *testing.T) {
	good := []Config{
		{Endpoints: []string{"127.0.0.1:2379"}},
		{Endpoints: []string{"http://a:2379", "http://b:2379"}, Username: "u", Password: "p"},
		{Endpoints: []string{"https://a:2379"}},
		{Endpoints: []string{"a:2379"}, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"},
		{Endpoints: []string{"http://[::1]:2379/", "unix:///run/etcd.sock"}},
	}
	for _, c := range good {
		if err := c.validate(); err != nil {
			t.Errorf("validate(%+v): %v", c, err)
		}
	}
	bad := []Config{
		{},
		{Endpoints: []string{"http://a:2379"}, CAFile: "ca.pem"},
		{Endpoints: []string{"a:2379"}, Username: "u"},
		{Endpoints: []string{"a:2379"}, Password: "p"},
		{Endpoints: []string{"a:2379"}, CertFile: "c.pem"},
		{Endpoints: []string{"a:2379"}, DialTimeout: -1},
		{Endpoints: []string{"http://"}},
		// Endpoints etcd's client would dial and time out on (or retry):
		// the wrong scheme, no port, a port out of range.
		{Endpoints: []string{"ftp://a:2379"}},
		{Endpoints: []string{"redis://a:2379"}},
		{Endpoints: []string{"http://a"}},
		{Endpoints: []string{"a"}},
		{Endpoints: []string{"http://a:99999"}},
		{Endpoints: []string{"a:0"}},
		{Endpoints: []string{"http://a:2379/v3"}},
		{Endpoints: []string{"http://u:p@a:2379"}},
		{Endpoints: []string{"u:p@a:2379"}},
	}
	for _, c := range bad {
		if err := c.validate(); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("validate(%+v) = %v; want ErrInvalidOptions", c, err)
		}
	}
	// An IPv6 address without brackets: the message says to add them
	// (it said only that no port was given, "usually 2379").
	for _, ep := range []string{"::1:2379", "http://fd00::1:2379"} {
		if err := (Config{Endpoints: []string{ep}}).validate(); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "IPv6 address in brackets") {
			t.Errorf("endpoint %q: %v; want ErrInvalidOptions saying to bracket the address", ep, err)
		}
	}
	if err := (Config{Endpoints: []string{"http://u:s3cret@a:bad"}}).validate(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("an endpoint with a password that does not parse: %v, want an error without the password", err)
	}
	if !(Config{Endpoints: []string{"https://a:1"}}).tlsOn() || (Config{Endpoints: []string{"a:1"}}).tlsOn() {
		t.Error("tlsOn: https:// endpoints turn TLS on, host:port alone does not")
	}
}

func TestParseEndpointsAndUser(t *testing.T) {
	if got := ParseEndpoints(" http://a:1, ,b:2,"); len(got) != 2 || got[0] != "http://a:1" || got[1] != "b:2" {
		t.Errorf("ParseEndpoints = %q", got)
	}
	if u, p := ParseUser("root:s3:cret"); u != "root" || p != "s3:cret" {
		t.Errorf("ParseUser = %q, %q", u, p)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("New(nil) = %v, want ErrInvalidOptions", err)
	}
	for _, p := range []string{"", "/no-slash", "a\x00/"} {
		o := newOptions([]Option{WithPrefix(p)})
		if err := o.validate(); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("prefix %q: %v, want ErrInvalidOptions", p, err)
		}
	}
}
