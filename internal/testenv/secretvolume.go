package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// SecretVolume is a directory laid out as the kubelet lays out a Secret
// (or a ConfigMap) mounted as a volume: each key is a symlink
// "key -> ..data/key", "..data" is a symlink to a directory of this
// version's files, and an update writes a new version's directory, points
// a temporary symlink at it and renames that over "..data". A reader of
// Path(key) thus sees every key of one version, never a mix, and each
// update gives the path a new file (os.SameFile tells them apart).
type SecretVolume struct {
	dir string

	mu      sync.Mutex
	version int
	keys    map[string]bool
}

// NewSecretVolume makes a volume in a t.TempDir() holding files, a map
// from each key to the files whose concatenation is its content.
func NewSecretVolume(t testing.TB, files map[string][]string) *SecretVolume {
	t.Helper()
	v := &SecretVolume{dir: t.TempDir(), keys: map[string]bool{}}
	v.Update(t, files)
	return v
}

// Path returns the path a pod reads key at.
func (v *SecretVolume) Path(key string) string { return filepath.Join(v.dir, key) }

// Update replaces the volume's content with files (key to the files whose
// concatenation is its content) in one atomic swap of "..data". A key
// left out is no longer readable, as when it leaves the Secret.
func (v *SecretVolume) Update(t testing.TB, files map[string][]string) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.version++
	version := fmt.Sprintf("..v%d", v.version)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, from := range files {
		if err := os.WriteFile(filepath.Join(v.dir, version, key), concatFiles(t, from...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for key := range files {
		if !v.keys[key] {
			if err := os.Symlink(filepath.Join("..data", key), v.Path(key)); err != nil {
				t.Fatal(err)
			}
			v.keys[key] = true
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// concatFiles returns the concatenation of the files from.
func concatFiles(t testing.TB, from ...string) []byte {
	t.Helper()
	var b []byte
	for _, f := range from {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, data...)
	}
	return b
}
