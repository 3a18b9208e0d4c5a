package backend

import (
	"fmt"
	"unicode/utf8"
)

// MaxNameLength is the longest lock name baton accepts. It is the limit of a
// Kubernetes object name (a DNS subdomain), so a name that works on one
// backend works on all of them.
const MaxNameLength = 253

// ValidateName reports whether name can be used as a lock name on every
// backend: 1 to 253 characters, lower-case letters, digits, '-' and '.',
// starting and ending with a letter or digit (a DNS-1123 subdomain, as for
// Kubernetes object names). The error matches ErrInvalidName and says what
// is wrong.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty", ErrInvalidName)
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("%w: name is %d characters long, at most %d are allowed", ErrInvalidName, len(name), MaxNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' || c == '.':
			if i == 0 || i == len(name)-1 {
				return fmt.Errorf("%w: %q must start and end with a lower-case letter or digit", ErrInvalidName, name)
			}
			if c == '.' && !isAlnum(name[i-1]) || i > 0 && name[i-1] == '.' && !isAlnum(c) {
				return fmt.Errorf("%w: %q: each dot-separated part must start and end with a lower-case letter or digit", ErrInvalidName, name)
			}
		default:
			// Name the whole character, not its first byte: 'ä', not 'Ã'.
			r, _ := utf8.DecodeRuneInString(name[i:])
			return fmt.Errorf("%w: %q has the character %q at byte %d; use lower-case letters, digits, '-' and '.'", ErrInvalidName, name, r, i)
		}
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
