package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/backend"
)

// recordVersion is the only record format this package reads and writes.
const recordVersion = 1

// Limits enforced on requests and on decoded records. A request that breaks
// them is refused before anything is written, so that every record this
// package writes decodes again.
const (
	maxOwnerLen  = 1024                 // bytes of Holder or Nonce
	maxBootIDLen = 128                  // bytes of a boot ID
	maxTTL       = 366 * 24 * time.Hour // longest lease accepted
	maxRecordLen = 64 << 10             // bytes of a record file
	timeLayout   = time.RFC3339Nano     // acquire_time, renew_time
)

// record is the content of NAME.json. See the package documentation for the
// format. A zero holder means the key is free (released or force-released);
// token and transitions survive that.
type record struct {
	key         string
	holder      string
	nonce       string
	token       uint64
	ttl         time.Duration
	bootID      string // boot the claim was made in; "" when free
	expires     int64  // machine clock (ns) at which the claim ends; 0 when free
	acquireTime time.Time
	renewTime   time.Time
	transitions uint64
}

// remaining reports how long r's claim still lasts at machine time now in
// boot bootID: 0 if the key is free, the claim was made in another boot, or
// it has expired.
func (r record) remaining(now int64, bootID string) time.Duration {
	if r.holder == "" || r.bootID != bootID || now >= r.expires {
		return 0
	}
	return time.Duration(r.expires - now)
}

// held returns the error with which r's claim, if it is live at machine
// time now in boot bootID, refuses another owner; else nil.
func (r record) held(now int64, bootID string) *backend.HeldError {
	left := r.remaining(now, bootID)
	if left == 0 {
		return nil
	}
	return &backend.HeldError{Key: r.key, Holder: r.holder, Token: r.token, RetryAfter: left}
}

func (r record) owns(holder, nonce string) bool {
	return r.holder != "" && r.holder == holder && r.nonce == nonce
}

func (r record) toRecord(now int64, bootID string) backend.Record {
	return backend.Record{
		Key:         r.key,
		Holder:      r.holder,
		Nonce:       r.nonce,
		Token:       r.token,
		TTL:         r.ttl,
		AcquireTime: r.acquireTime,
		RenewTime:   r.renewTime,
		Transitions: r.transitions,
		Remaining:   r.remaining(now, bootID),
	}
}

// wireRecord fixes the field order of the encoding.
type wireRecord struct {
	Version     int    `json:"version"`
	Key         string `json:"key"`
	Holder      string `json:"holder"`
	Nonce       string `json:"nonce"`
	Token       uint64 `json:"token"`
	TTL         int64  `json:"ttl_ns"`
	BootID      string `json:"boot_id"`
	Expires     int64  `json:"expires_mono_ns"`
	AcquireTime string `json:"acquire_time"`
	RenewTime   string `json:"renew_time"`
	Transitions uint64 `json:"transitions"`
}

// encode returns r as one line of JSON. r must be valid (see check); the
// result then decodes to r.
func (r record) encode() []byte {
	b, err := json.Marshal(wireRecord{
		Version:     recordVersion,
		Key:         r.key,
		Holder:      r.holder,
		Nonce:       r.nonce,
		Token:       r.token,
		TTL:         int64(r.ttl),
		BootID:      r.bootID,
		Expires:     r.expires,
		AcquireTime: r.acquireTime.UTC().Format(timeLayout),
		RenewTime:   r.renewTime.UTC().Format(timeLayout),
		Transitions: r.transitions,
	})
	if err != nil {
		panic("file: encoding a record cannot fail: " + err.Error()) // only strings and integers
	}
	return append(b, '\n')
}

// corrupt returns an error matching backend.ErrCorruptRecord.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{backend.ErrCorruptRecord}, args...)...)
}

// errNewerFormat marks a file of a format version above recordVersion: a
// newer baton wrote it. It is refused and kept like a corrupt file (it
// matches backend.ErrCorruptRecord too), but it is not one, so its error
// must not tell anyone to delete or rewrite it.
var errNewerFormat = errors.New("written by a newer version of baton")

// formatVersion returns the error for a file (what: "record", "epoch
// file", "floor file") of format version v, which is not recordVersion.
func formatVersion(what string, v int64) error {
	if v > recordVersion {
		return fmt.Errorf("%w: %s format version %d, %w; this program reads version %d: run that version (or a later one) "+
			"in every process that uses this directory; the file is not damaged: do not delete or rewrite it",
			backend.ErrCorruptRecord, what, v, errNewerFormat, recordVersion)
	}
	return corrupt("%s format version %d; this program reads version %d", what, v, recordVersion)
}

// decodeRecord parses a record strictly: one JSON object with exactly the
// fields of version 1, each once and spelled exactly, values of the right
// type and range, consistent with each other, and nothing after the object
// but white space. Every error matches backend.ErrCorruptRecord; the caller
// adds the file's path.
func decodeRecord(data []byte) (record, error) {
	if len(data) > maxRecordLen {
		return record{}, corrupt("%d bytes, more than the %d a record can have", len(data), maxRecordLen)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := openObject(dec); err != nil {
		return record{}, err
	}
	raw := rawRecord{seen: make(map[string]bool, len(recordFields))}
	for dec.More() {
		if err := raw.decodeField(dec); err != nil {
			return record{}, err
		}
	}
	if err := closeObject(dec); err != nil {
		return record{}, err
	}
	return raw.record()
}

// recordFields are the fields of a version 1 record, every one required.
var recordFields = [...]string{"version", "key", "holder", "nonce", "token", "ttl_ns", "boot_id",
	"expires_mono_ns", "acquire_time", "renew_time", "transitions"}

// rawRecord is a record as decodeRecord reads it, field by field, before
// the checks that need every field.
type rawRecord struct {
	r                     record
	version, ttl, expires uint64
	acq, ren              string
	seen                  map[string]bool
}

// openObject reads the '{' that starts a record.
func openObject(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return corrupt("empty file")
		}
		return notJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return corrupt("not a JSON object")
	}
	return nil
}

// closeObject reads the '}' that ends a record and checks that nothing
// follows it.
func closeObject(dec *json.Decoder) error {
	if tok, err := dec.Token(); err != nil {
		return notJSON(err)
	} else if d, ok := tok.(json.Delim); !ok || d != '}' {
		return corrupt("not JSON: unexpected %v", tok)
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("data after the record")
	}
	return nil
}

// decodeField reads one field of the record: its name, then its value.
func (raw *rawRecord) decodeField(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return notJSON(err)
	}
	name, ok := tok.(string)
	if !ok {
		return corrupt("not JSON: object key %v", tok)
	}
	if raw.seen[name] {
		return corrupt("field %q appears twice", name)
	}
	raw.seen[name] = true
	if err := raw.decodeValue(dec, name); err != nil {
		return err
	}
	if name == "version" && raw.version != recordVersion {
		// Checked at once, so that a newer format is reported as such
		// rather than by its first unknown field.
		return formatVersion("record", int64(min(raw.version, math.MaxInt64)))
	}
	return nil
}

// decodeValue reads the value of the field name.
func (raw *rawRecord) decodeValue(dec *json.Decoder, name string) (err error) {
	r := &raw.r
	switch name {
	case "version":
		raw.version, err = decodeUint(dec, name)
	case "key":
		r.key, err = decodeString(dec, name)
	case "holder":
		r.holder, err = decodeString(dec, name)
	case "nonce":
		r.nonce, err = decodeString(dec, name)
	case "token":
		r.token, err = decodeUint(dec, name)
	case "ttl_ns":
		raw.ttl, err = decodeUint(dec, name)
	case "boot_id":
		r.bootID, err = decodeString(dec, name)
	case "expires_mono_ns":
		raw.expires, err = decodeUint(dec, name)
	case "acquire_time":
		raw.acq, err = decodeString(dec, name)
	case "renew_time":
		raw.ren, err = decodeString(dec, name)
	case "transitions":
		r.transitions, err = decodeUint(dec, name)
	default:
		return corrupt("unknown field %q", name)
	}
	return err
}

// record checks that every field was there and in range, and returns the
// record.
func (raw *rawRecord) record() (record, error) {
	for _, name := range recordFields {
		if !raw.seen[name] {
			return record{}, corrupt("field %q is missing", name)
		}
	}
	r := raw.r
	if raw.ttl > uint64(maxTTL) {
		return record{}, corrupt("ttl_ns %d is longer than %v", raw.ttl, maxTTL)
	}
	r.ttl = time.Duration(raw.ttl)
	if raw.expires > math.MaxInt64 {
		return record{}, corrupt("expires_mono_ns %d is out of range", raw.expires)
	}
	r.expires = int64(raw.expires)
	var err error
	if r.acquireTime, err = decodeTime("acquire_time", raw.acq); err != nil {
		return record{}, err
	}
	if r.renewTime, err = decodeTime("renew_time", raw.ren); err != nil {
		return record{}, err
	}
	if err := r.check(); err != nil {
		return record{}, err
	}
	return r, nil
}

// check reports whether r's fields are consistent. Records that pass encode
// to JSON that decodes back to them.
func (r record) check() error {
	if err := backend.ValidateName(r.key); err != nil {
		return corrupt("key: %v", err)
	}
	if r.token == 0 {
		return corrupt("token is 0; the first token issued is 1")
	}
	if r.transitions >= r.token {
		return corrupt("%d transitions but only %d tokens issued", r.transitions, r.token)
	}
	if r.ttl <= 0 || r.ttl > maxTTL {
		return corrupt("ttl_ns %d is not in 1..%d", int64(r.ttl), int64(maxTTL))
	}
	if r.holder == "" {
		if r.nonce != "" || r.bootID != "" || r.expires != 0 {
			return corrupt("a free record must have empty nonce and boot_id and expires_mono_ns 0")
		}
	} else {
		if err := checkOwner(r.holder, r.nonce); err != nil {
			return corrupt("%v", err)
		}
		if r.bootID == "" || len(r.bootID) > maxBootIDLen || !utf8.ValidString(r.bootID) {
			return corrupt("a held record needs a boot_id of 1 to %d bytes", maxBootIDLen)
		}
		if r.expires < int64(r.ttl) {
			return corrupt("expires_mono_ns %d is less than ttl_ns %d", r.expires, int64(r.ttl))
		}
	}
	for _, t := range [...]time.Time{r.acquireTime, r.renewTime} {
		if y := t.UTC().Year(); y < 1 || y > 9999 {
			return corrupt("time %v is out of range", t)
		}
	}
	return nil
}

// checkOwner applies the limits on Holder and Nonce.
func checkOwner(holder, nonce string) error {
	for _, f := range [...]struct{ name, v string }{{"holder", holder}, {"nonce", nonce}} {
		switch {
		case f.v == "":
			return fmt.Errorf("%s is empty", f.name)
		case len(f.v) > maxOwnerLen:
			return fmt.Errorf("%s is %d bytes long, at most %d are allowed", f.name, len(f.v), maxOwnerLen)
		case !utf8.ValidString(f.v):
			return fmt.Errorf("%s %q is not valid UTF-8", f.name, f.v)
		}
	}
	return nil
}

// notJSON reports a syntax error from the JSON decoder.
func notJSON(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("truncated JSON")
	}
	return corrupt("not JSON: %v", err)
}

func decodeString(dec *json.Decoder, name string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", notJSON(err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", corrupt("field %q must be a string", name)
	}
	return s, nil
}

func decodeUint(dec *json.Decoder, name string) (uint64, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, notJSON(err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, corrupt("field %q must be a number", name)
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, corrupt("field %q must be a whole number from 0 to %d, not %s", name, uint64(math.MaxUint64), n)
	}
	return v, nil
}

func decodeTime(name, s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, corrupt("field %q: %v", name, err)
	}
	return t.UTC(), nil
}
