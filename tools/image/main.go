// Command image packs the file tree that rootfs.sh writes into the baton
// container image, without a Docker daemon and without pulling anything: the
// image has no base, one layer built here, and a config that runs
// /usr/local/bin/baton as the tree's non-root user.
//
//	go run . -rootfs DIR -name localhost/baton:dev -oci OUT/oci -tar OUT/baton.tar
//
// -oci writes an OCI image layout directory (for skopeo, crane, oras); -tar
// writes a tarball that `docker load`, `podman load`, `ctr images import` and
// `kind load image-archive` read. Every time in the image is the Unix epoch,
// and every file belongs to root except the user's home directory, so the
// same tree always gives the same image digest.
//
// `make image` runs it; the tests in this directory check the image it makes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.rootfs, "rootfs", "", "the file tree to pack (written by rootfs.sh)")
	fs.StringVar(&o.name, "name", "localhost/baton:dev", "the image reference recorded in the outputs")
	fs.StringVar(&o.platform, "platform", "linux/amd64", "OS/ARCH of the binary in the tree")
	fs.StringVar(&o.ociDir, "oci", "", "write an OCI image layout to this directory (must not exist)")
	fs.StringVar(&o.tarPath, "tar", "", "write a docker-load tarball to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rootfs == "" {
		return errors.New("-rootfs is required: the directory rootfs.sh wrote")
	}
	if o.ociDir == "" && o.tarPath == "" {
		return errors.New("nothing to write: give -oci DIR, -tar FILE or both")
	}
	goos, goarch, ok := strings.Cut(o.platform, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return fmt.Errorf("invalid -platform %q: want OS/ARCH, such as linux/amd64", o.platform)
	}
	o.os, o.arch = goos, goarch
	return build(o)
}
