package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image runs. The Dockerfile states the same; the tests compare.
const (
	entrypoint = "/usr/local/bin/baton"
	pathEnv    = "PATH=/usr/local/bin"
	sourceURL  = "https://github.com/baton-go/baton"
)

// epoch is every time recorded in the image.
var epoch = time.Unix(0, 0).UTC()

type options struct {
	rootfs, name, platform, ociDir, tarPath string
	os, arch                                string
}

// user is the image's non-root user, from the tree's /etc/passwd.
type user struct {
	name     string
	uid, gid int
	home     string // absolute, as in /etc/passwd
}

func build(o options) error {
	ref, err := name.NewTag(o.name)
	if err != nil {
		return fmt.Errorf("invalid -name %q: %w", o.name, err)
	}
	u, err := readUser(filepath.Join(o.rootfs, "etc", "passwd"))
	if err != nil {
		return err
	}
	layerTar, err := tarTree(o.rootfs, u)
	if err != nil {
		return err
	}
	img, err := newImage(layerTar, u, o)
	if err != nil {
		return err
	}
	if o.ociDir != "" {
		if err := writeLayout(o.ociDir, ref, img); err != nil {
			return err
		}
	}
	if o.tarPath != "" {
		if err := tarball.WriteToFile(o.tarPath, ref, img); err != nil {
			return fmt.Errorf("writing %s: %w", o.tarPath, err)
		}
	}
	return nil
}

// readUser returns the one account other than root in passwd.
func readUser(passwd string) (user, error) {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return user{}, fmt.Errorf("reading the image's users: %w (run rootfs.sh to write the tree)", err)
	}
	var users []user
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 7 {
			return user{}, fmt.Errorf("%s: malformed line %q: want 7 fields", passwd, line)
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return user{}, fmt.Errorf("%s: line %q: %w", passwd, line, err)
		}
		if uid != 0 {
			users = append(users, user{name: f[0], uid: uid, gid: gid, home: f[5]})
		}
	}
	if len(users) != 1 || users[0].gid == 0 || !strings.HasPrefix(users[0].home, "/") {
		return user{}, fmt.Errorf("%s: want exactly one non-root user with a non-root group and an absolute home, found %d", passwd, len(users))
	}
	return users[0], nil
}

// tarTree returns the layer of the tree under root: files in lexical order,
// all times at the epoch, owned by root except the user's home directory.
func tarTree(root string, u user) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	home := strings.TrimPrefix(u.home, "/")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := header(rel, path, fi)
		if err != nil {
			return err
		}
		if rel == home || strings.HasPrefix(rel, home+"/") {
			hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = u.uid, u.gid, u.name, u.name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			return copyFile(tw, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// header is the tar header of one entry of the tree, owned by root.
func header(rel, path string, fi fs.FileInfo) (*tar.Header, error) {
	mode := int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	hdr := &tar.Header{Name: rel, Mode: mode, ModTime: epoch, Uname: "root", Gname: "root"}
	switch t := fi.Mode().Type(); {
	case t == 0:
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	case t == fs.ModeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
	case t == fs.ModeSymlink:
		target, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	default:
		return nil, fmt.Errorf("%s: unsupported file type %v (want regular files, directories and symlinks)", rel, t)
	}
	return hdr, nil
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// newImage is an image with no base and layerTar as its only layer.
func newImage(layerTar []byte, u user, o options) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: o.arch,
		OS:           o.os,
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{entrypoint},
			Env:        []string{pathEnv},
			User:       fmt.Sprintf("%d:%d", u.uid, u.gid),
			WorkingDir: u.home,
			Labels: map[string]string{
				"org.opencontainers.image.source": sourceURL,
				"org.opencontainers.image.title":  "baton",
			},
		},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "tools/image/rootfs.sh"},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// writeLayout writes img as the only image of a new OCI layout at dir,
// named by ref (the tag, and the whole name for containerd).
func writeLayout(dir string, ref name.Tag, img v1.Image) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists: remove it first", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	return nil
}
