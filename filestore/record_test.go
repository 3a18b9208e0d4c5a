package filestore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

func validHeld() record {
	return record{
		key:         "nightly-report",
		holder:      "host-1a2b3c4d",
		nonce:       "0011223344556677",
		token:       42,
		ttl:         15 * time.Second,
		bootID:      "3c454b82-b157-4c7f-9f86-6d594cb37345",
		expires:     86412345678901,
		acquireTime: time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC),
		renewTime:   time.Date(2025, 1, 2, 3, 4, 10, 0, time.UTC),
		transitions: 7,
	}
}

func validFree() record { return free(validHeld()) }

func sameRecord(a, b record) bool {
	return a.key == b.key && a.holder == b.holder && a.nonce == b.nonce && a.token == b.token &&
		a.ttl == b.ttl && a.bootID == b.bootID && a.expires == b.expires &&
		a.acquireTime.Equal(b.acquireTime) && a.renewTime.Equal(b.renewTime) && a.transitions == b.transitions
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []record{validHeld(), validFree()} {
		data := r.encode()
		got, err := decodeRecord(data)
		if err != nil {
			t.Fatalf("decodeRecord(%s): %v", data, err)
		}
		if !sameRecord(got, r) {
			t.Errorf("decodeRecord(encode(%+v)) = %+v", r, got)
		}
	}
}

func TestRecordFormatIsDocumented(t *testing.T) {
	// The example in the package documentation, verbatim.
	doc := `{"version":1,"key":"nightly-report","holder":"host-1a2b3c4d","nonce":"0011223344556677",
	 "token":42,"ttl_ns":15000000000,"boot_id":"3c454b82-b157-4c7f-9f86-6d594cb37345",
	 "expires_mono_ns":86412345678901,"acquire_time":"2025-01-02T03:04:05.123456789Z",
	 "renew_time":"2025-01-02T03:04:10.123456789Z","transitions":7}`
	r, err := decodeRecord([]byte(doc))
	if err != nil {
		t.Fatalf("the documented example does not decode: %v", err)
	}
	want := validHeld()
	want.renewTime = time.Date(2025, 1, 2, 3, 4, 10, 123456789, time.UTC)
	if !sameRecord(r, want) {
		t.Errorf("documented example decodes to %+v, want %+v", r, want)
	}
	if got := string(want.encode()); got != strings.Join(strings.Fields(doc), "")+"\n" {
		t.Errorf("encode = %s\nthe documentation shows %s", got, doc)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	held := string(validHeld().encode())
	free := string(validFree().encode())
	replace := func(s, old, new string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("%q not in %s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
	cases := []struct{ name, data, want string }{
		{"empty", "", "empty file"},
		{"whitespace", " \n", "empty file"},
		{"not json", "garbage", "not JSON"},
		{"array", "[]", "not a JSON object"},
		{"null", "null", "not a JSON object"},
		{"truncated", held[:len(held)/2], "truncated JSON"},
		{"trailing object", held + "{}", "data after the record"},
		{"trailing garbage", strings.TrimSpace(held) + "x", "after the record"},
		{"two records", held + held, "data after the record"},
		{"unknown version", replace(held, `"version":1`, `"version":2`), "version 2"},
		{"version zero", replace(held, `"version":1`, `"version":0`), "version 0"},
		{"unknown field", replace(held, `"version":1,`, `"version":1,"extra":1,`), `unknown field "extra"`},
		{"wrong case field", replace(held, `"holder"`, `"Holder"`), `unknown field "Holder"`},
		{"duplicate field", replace(held, `"version":1,`, `"version":1,"token":43,`), `"token" appears twice`},
		{"missing field", replace(held, `,"transitions":7`, ``), `"transitions" is missing`},
		{"string token", replace(held, `"token":42`, `"token":"42"`), `"token" must be a number`},
		{"negative token", replace(held, `"token":42`, `"token":-1`), "whole number"},
		{"fractional token", replace(held, `"token":42`, `"token":4.2`), "whole number"},
		{"exponent token", replace(held, `"token":42`, `"token":4e1`), "whole number"},
		{"huge token", replace(held, `"token":42`, `"token":18446744073709551616`), "whole number"},
		{"null holder", replace(held, `"holder":"host-1a2b3c4d"`, `"holder":null`), `"holder" must be a string`},
		{"token zero with holder", replace(held, `"token":42`, `"token":0`), "token is 0"},
		{"token zero free", replace(free, `"token":42`, `"token":0`), "token is 0"},
		{"transitions not below token", replace(held, `"transitions":7`, `"transitions":42`), "transitions"},
		{"holder without nonce", replace(held, `"nonce":"0011223344556677"`, `"nonce":""`), "nonce is empty"},
		{"holder without boot", replace(held, `"boot_id":"3c454b82-b157-4c7f-9f86-6d594cb37345"`, `"boot_id":""`), "boot_id"},
		{"nonce without holder", replace(held, `"holder":"host-1a2b3c4d"`, `"holder":""`), "free record"},
		{"free with expiry", replace(free, `"expires_mono_ns":0`, `"expires_mono_ns":5`), "free record"},
		{"zero ttl", replace(held, `"ttl_ns":15000000000`, `"ttl_ns":0`), "ttl_ns"},
		{"absurd ttl", replace(held, `"ttl_ns":15000000000`, `"ttl_ns":9000000000000000000`), "ttl_ns"},
		{"expiry before ttl", replace(held, `"expires_mono_ns":86412345678901`, `"expires_mono_ns":1`), "expires_mono_ns"},
		{"expiry out of range", replace(held, `"expires_mono_ns":86412345678901`, `"expires_mono_ns":9223372036854775808`), "out of range"},
		{"invalid key", replace(held, `"key":"nightly-report"`, `"key":"../etc/passwd"`), "invalid lock name"},
		{"bad time", replace(held, `"acquire_time":"2025-01-02T03:04:05.123456789Z"`, `"acquire_time":"yesterday"`), "acquire_time"},
		{"time out of range", replace(held, `"acquire_time":"2025-01-02T03:04:05.123456789Z"`, `"acquire_time":"0000-01-01T00:00:00+01:00"`), "out of range"},
		{"long holder", replace(held, `"holder":"host-1a2b3c4d"`, `"holder":"`+strings.Repeat("h", maxOwnerLen+1)+`"`), "holder is 1025 bytes"},
		{"too large", held + strings.Repeat(" ", maxRecordLen), "more than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := decodeRecord([]byte(c.data))
			if err == nil {
				t.Fatalf("decodeRecord(%q) = %+v, want an error", c.data, r)
			}
			if !errors.Is(err, backend.ErrCorruptRecord) {
				t.Errorf("error %v does not match ErrCorruptRecord", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestDecodeRecordAcceptsWhitespaceAndOrder(t *testing.T) {
	data := `  { "transitions" : 0 , "renew_time":"2025-01-02T04:04:05+01:00", "acquire_time":"2025-01-02T03:04:05Z",
		"expires_mono_ns":0,"boot_id":"","ttl_ns":1,"token":1,"nonce":"","holder":"","key":"a","version":1 }` + "\n\n"
	r, err := decodeRecord([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if !r.acquireTime.Equal(r.renewTime) || r.key != "a" || r.token != 1 {
		t.Errorf("decoded %+v", r)
	}
}

// FuzzDecodeRecord checks that the decoder never panics, and that whatever
// it accepts encodes to a record that decodes to the same value (and to the
// same bytes again), so that a record this package writes is never taken
// for corrupt after a rewrite.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(validHeld().encode())
	f.Add(validFree().encode())
	f.Add([]byte(`{"version":1,"key":"a","holder":"h","nonce":"n","token":18446744073709551615,"ttl_ns":31622400000000000,"boot_id":"b","expires_mono_ns":9223372036854775807,"acquire_time":"9999-12-31T23:59:59.999999999Z","renew_time":"0001-01-01T00:00:00Z","transitions":18446744073709551614}`))
	f.Add([]byte(`{"version":1,"key":"a","holder":"h\u00e9\ud800","nonce":"\u0000<>&","token":2,"ttl_ns":1,"boot_id":"\ufffd","expires_mono_ns":1,"acquire_time":"2025-01-02T03:04:05+14:00","renew_time":"2025-01-02T03:04:05-12:00","transitions":1}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"version":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"version":1}{"version":1}`))
	f.Add([]byte(""))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, backend.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			return
		}
		enc := r.encode()
		r2, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("accepted %q as %+v, but its encoding %s does not decode: %v", data, r, enc, err)
		}
		if !sameRecord(r, r2) {
			t.Fatalf("accepted %q as %+v, re-decoded as %+v", data, r, r2)
		}
		if enc2 := r2.encode(); string(enc2) != string(enc) {
			t.Fatalf("encoding is not stable: %s then %s", enc, enc2)
		}
	})
}
