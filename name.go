package baton

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"github.com/baton-go/baton/backend"
)

// MaxNameLength is the longest lock name baton accepts. It is the limit of a
// Kubernetes object name (a DNS subdomain), so a name that works on one
// backend works on all of them.
const MaxNameLength = backend.MaxNameLength

// ValidateName reports whether name can be used as a lock name on every
// backend: 1 to 253 characters, lower-case letters, digits, '-' and '.',
// starting and ending with a letter or digit (a DNS-1123 subdomain, as for
// Kubernetes object names). The error matches ErrInvalidName and says what
// is wrong. NameFor makes a valid name from any key.
func ValidateName(name string) error { return backend.ValidateName(name) }

// checkName is ValidateName for the constructors: the error of a name
// that is not empty says that NameFor makes a valid name from any key,
// since such names are mostly made from data.
func checkName(name string) error {
	err := ValidateName(name)
	if err != nil && name != "" {
		return fmt.Errorf("%w; for a lock per key (an ID, an e-mail address, a path), name it baton.NameFor(key)", err)
	}
	return err
}

// Lengths of NameFor's parts: the readable part is cut to nameForReadable
// bytes; the hash is 16 bytes of SHA-256 in base32 without padding.
const (
	nameForReadable = 32
	nameForHash     = 26
	// NameForMaxLength is the longest name NameFor returns, so that a
	// prefix of up to MaxNameLength-NameForMaxLength characters fits
	// before it.
	NameForMaxLength = nameForReadable + 1 + nameForHash
)

// NameFor returns a valid lock name for any key, for a lock per entity
// named from data: an order ID, an e-mail address, a URL, a path, a
// tenant's name in any script, of any length. Equal keys give equal names,
// and different keys different names: the name ends with 128 bits of the
// key's SHA-256 (26 characters of base32), so two keys share a lock only
// if SHA-256 collides. It begins with a readable part for status views:
// the key's ASCII letters (lower-cased) and digits, every other run of
// bytes as one '-', cut to 32 characters. NameFor("Order 8812") is
// "order-8812-" followed by the hash; a key without letters or digits
// gives the hash alone. The name is at most NameForMaxLength (59)
// characters long, and prefix+NameFor(key) is a valid name for any valid
// name followed by '.' or '-' as prefix, up to 194 characters: use a
// prefix to keep the kinds of entity apart ("orders.", "tenants.").
//
// Mapping a key by hand instead (lower-casing it, replacing the
// characters a name refuses, cutting it at MaxNameLength) makes different
// keys share a lock ("Ann@x.io" and "ann-x.io"; two URLs whose first 253
// characters are equal), and every program that locks the entity must
// map it the same way, or one entity has two locks. NameFor is that one
// way: it is the same in every version of baton, and "baton name KEY"
// prints it for scripts.
//
// NameFor compares keys byte for byte: keys that differ only in case or
// in their Unicode normalization are different keys with different locks.
// Where the application treats them as one entity, normalize the key
// before calling NameFor (strings.ToLower, package
// golang.org/x/text/unicode/norm).
func NameFor(key string) string {
	sum := sha256.Sum256([]byte(key))
	// base32's standard alphabet in lower case: letters and the digits 2
	// to 7, all valid in a lock name.
	hash := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
	if r := readable(key); r != "" {
		return r + "-" + hash
	}
	return hash
}

// readable returns key's ASCII letters (lower-cased) and digits, every
// other run of bytes as one '-', without a '-' at either end, cut to
// nameForReadable bytes.
func readable(key string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(key) && b.Len() < nameForReadable; i++ {
		c := key[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			dash = b.Len() > 0
			continue
		}
		if dash {
			b.WriteByte('-')
			dash = false
			if b.Len() == nameForReadable {
				break
			}
		}
		b.WriteByte(c)
	}
	return strings.TrimRight(b.String(), "-")
}
