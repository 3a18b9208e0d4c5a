#!/bin/sh
# rootfs.sh DIR writes the file tree of the baton image into DIR (which must
# not exist): the static baton binary, CA certificates, and a non-root user.
#
# It is the one place the image's build settings are written: `make image`
# (tools/image packs DIR into an OCI image without a Docker daemon) and the
# Dockerfile's build stage both run it, and tools/image's tests check the
# flags recorded in the binary and that both run this script.
#
# Environment: GO (default go), GOARCH (default: go env GOARCH), CA_CERTS
# (default /etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates).
set -eu
umask 022 # every directory and file readable by the image's user

# The build settings. CGO_ENABLED=0 makes the binary static; -trimpath and
# an empty build ID make it independent of the build machine's paths;
# -buildvcs=auto records the git revision when built in a git clone (the
# toolchain does not stamp a worktree, whose .git is a file).
BATON_CGO_ENABLED=0
BATON_BUILDFLAGS="-trimpath -buildvcs=auto"
BATON_TAGS="netgo,osusergo"
BATON_LDFLAGS="-s -w -buildid="

# The non-root user the image runs as (the UID distroless images use).
BATON_USER=nonroot
BATON_UID=65532
BATON_GID=65532

dir=${1:?usage: rootfs.sh DIR}
GO=${GO:-go}
CA_CERTS=${CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
if [ -e "$dir" ]; then
	echo "rootfs.sh: $dir exists; remove it first" >&2
	exit 1
fi
if [ ! -s "$CA_CERTS" ]; then
	echo "rootfs.sh: no CA certificates at $CA_CERTS: install Debian's ca-certificates package (apt-get install ca-certificates) or set CA_CERTS" >&2
	exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$dir/usr/local/bin" "$dir/etc/ssl/certs" "$dir/tmp" "$dir/home/$BATON_USER"
dir=$(cd "$dir" && pwd)
# shellcheck disable=SC2086 # BATON_BUILDFLAGS is a list of flags
# cmd/baton is a module of its own (docs/modules.md).
(cd "$here/../../cmd/baton" && CGO_ENABLED=$BATON_CGO_ENABLED GOOS=linux "$GO" build \
	$BATON_BUILDFLAGS -tags "$BATON_TAGS" -ldflags "$BATON_LDFLAGS" \
	-o "$dir/usr/local/bin/baton" .)
cp "$CA_CERTS" "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:%s:%s:%s:/home/%s:/sbin/nologin\n' \
	"$BATON_USER" "$BATON_UID" "$BATON_GID" "$BATON_USER" "$BATON_USER" >"$dir/etc/passwd"
printf 'root:x:0:\n%s:x:%s:\n' "$BATON_USER" "$BATON_GID" >"$dir/etc/group"
chmod 0755 "$dir/usr/local/bin/baton" "$dir/home/$BATON_USER"
chmod 0644 "$dir/etc/passwd" "$dir/etc/group" "$dir/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$dir/tmp"
# As root (the Dockerfile's build stage), give the user its home directory;
# `make image` records that owner in the layer instead (tools/image).
if [ "$(id -u)" = 0 ]; then
	chown "$BATON_UID:$BATON_GID" "$dir/home/$BATON_USER"
fi
