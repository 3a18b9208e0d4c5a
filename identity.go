package baton

import (
	"crypto/rand"
	"encoding/hex"
	"os"
)

// DefaultIdentity returns the host name (in Kubernetes, the pod name)
// followed by a random suffix that is new for every call, so that two
// processes on one host, or a restarted process, never share an identity.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "baton"
	}
	return host + "-" + randomHex(4)
}

// NewNonce returns a random value that names one acquisition. Backends never
// create nonces; the engine does.
func NewNonce() string { return randomHex(8) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
