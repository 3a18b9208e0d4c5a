package baton

import "github.com/baton-go/baton/backend"

// MaxNameLength is the longest lock name baton accepts. It is the limit of a
// Kubernetes object name (a DNS subdomain), so a name that works on one
// backend works on all of them.
const MaxNameLength = backend.MaxNameLength

// ValidateName reports whether name can be used as a lock name on every
// backend: 1 to 253 characters, lower-case letters, digits, '-' and '.',
// starting and ending with a letter or digit (a DNS-1123 subdomain, as for
// Kubernetes object names). The error matches ErrInvalidName and says what
// is wrong.
func ValidateName(name string) error { return backend.ValidateName(name) }
