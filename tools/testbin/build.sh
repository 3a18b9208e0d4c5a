#!/usr/bin/env bash
# build.sh builds the test binaries once and prints their directory.
#
#   tools/testbin/build.sh              build if needed; last stdout line: the dir
#   tools/testbin/build.sh --print-dir  print the dir only, build nothing
#   tools/testbin/build.sh --force      rebuild even if the dir is complete
#
# The directory holds kube-apiserver and etcd, the layout controller-runtime's
# envtest expects in KUBEBUILDER_ASSETS:
#
#   ${BATON_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/testbin}/k8s-<kube>-etcd-<etcd>/
#       kube-apiserver   k8s.io/kubernetes/cmd/kube-apiserver, the version pinned in go.mod
#       etcd             go.etcd.io/etcd/server/v3, the version pinned in etcd/go.mod
#       etcdutl          go.etcd.io/etcd/etcdutl/v3, the same version (snapshot restores)
#       .stamp           written last, after every binary answered --version
#
# Both are built from the Go module proxy, from the pins in this directory
# (go.mod/go.sum for kube-apiserver, etcd/go.mod/go.sum for etcd; update.sh
# regenerates them). The cache is keyed by the two versions, so changing a pin
# builds into a new directory. A complete directory is reused and never
# rebuilt; the first build takes several minutes on 2 cores.
#
# internal/testenv computes the same directory in Go (testbinDir in
# internal/testenv/kube.go): change both together.
#
# Everything but the directory goes to stderr, so that a Makefile can say
#   KUBEBUILDER_ASSETS=$$(tools/testbin/build.sh) go test ./...
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GO="${GO:-go}"

log() { printf 'testbin: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
usage() { sed -n '2,6s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

mode=build
case "${1:-}" in
"") ;;
--print-dir) mode=print ;;
--force) mode=force ;;
-h | --help)
	usage
	exit 0
	;;
*)
	usage >&2
	exit 2
	;;
esac

# modver FILE MODULE prints MODULE's version in the require list of FILE.
modver() {
	awk -v m="$2" '$1 == m && NF >= 2 { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

kube_version="$(modver "$here/go.mod" k8s.io/kubernetes)"
etcd_version="$(modver "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$kube_version" ]] || die "no k8s.io/kubernetes in $here/go.mod"
[[ -n "$etcd_version" ]] || die "no go.etcd.io/etcd/server/v3 in $here/etcd/go.mod"

base="${BATON_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/testbin}"
key="k8s-${kube_version#v}-etcd-${etcd_version#v}"
dir="$base/$key"

if [[ "$mode" == print ]]; then
	echo "$dir"
	exit 0
fi

# pins prints a digest of the files the binaries are built from.
pins() { cat "$here/go.mod" "$here/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" | sha256sum | cut -c1-16; }

# answers DIR checks that the binaries in DIR run and report the pinned
# versions. A directory built before etcdutl was added lacks it, and is
# built again.
answers() {
	local d="$1" out
	[[ -x "$d/etcd" && -x "$d/etcdutl" && -x "$d/kube-apiserver" ]] || return 1
	out="$("$d/etcd" --version 2>&1)" || return 1
	grep -qF "etcd Version: ${etcd_version#v}" <<<"$out" || return 1
	out="$("$d/etcdutl" version 2>&1)" || return 1
	grep -qF "etcdutl version: ${etcd_version#v}" <<<"$out" || return 1
	out="$("$d/kube-apiserver" --version 2>&1)" || return 1
	grep -qF "Kubernetes $kube_version" <<<"$out" || return 1
}

# complete reports whether $dir is a finished build that still runs.
complete() {
	[[ -f "$dir/.stamp" ]] && answers "$dir" || return 1
	if ! grep -qxF "pins $(pins)" "$dir/.stamp"; then
		log "warning: $here/{go.mod,go.sum,etcd/go.*} changed since $dir was built, but the versions did not;"
		log "warning: the cache is keyed by version only: run $0 --force to rebuild"
	fi
}

if [[ "$mode" == build ]] && complete; then
	log "using $dir"
	echo "$dir"
	exit 0
fi

command -v "$GO" >/dev/null || die "go not found (set GO or PATH)"
mkdir -p "$base"

# One build at a time per cache; a second caller waits and then reuses it.
if command -v flock >/dev/null; then
	exec 9>"$base/.lock"
	if ! flock -n 9; then
		log "another build.sh is building in $base; waiting for it"
		flock 9
	fi
	if [[ "$mode" == build ]] && complete; then
		log "using $dir (built meanwhile)"
		echo "$dir"
		exit 0
	fi
	rm -rf "$base/.build-$key".* # left by a build that was killed
fi

tmp="$(mktemp -d "$base/.build-$key.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# The binaries are built for this machine, statically, without whatever the
# caller's GOFLAGS holds (-race, -cover, -mod=vendor would all break or bloat
# them), and with the pinned go.sum only (-mod=readonly).
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly
GOOS="$("$GO" env GOHOSTOS)"
GOARCH="$("$GO" env GOHOSTARCH)"
export GOOS GOARCH

start=$SECONDS
fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# progress NAME TOTAL LOG reads `go build -v` output (one package per line as
# each is compiled) into LOG and reports the count every 15 seconds.
progress() {
	local name="$1" total="$2" logf="$3" n=0 last=$SECONDS line
	while IFS= read -r line; do
		printf '%s\n' "$line" >>"$logf"
		n=$((n + 1))
		if ((SECONDS - last >= 15)); then
			last=$SECONDS
			log "$name: compiled $n of at most $total packages ($(fmt_secs $((SECONDS - start))) so far)"
		fi
	done
}

# build NAME MODDIR PKG LDFLAGS TAGS builds PKG of the module in MODDIR into $tmp/NAME.
build() {
	local name="$1" moddir="$2" pkg="$3" ldflags="$4" tags="$5" total logf
	logf="$tmp/.$name.log"
	log "$name: downloading modules of $pkg (Go module proxy)"
	if ! (cd "$moddir" && "$GO" list -deps -tags="$tags" "$pkg" >"$tmp/.$name.deps" 2>"$logf"); then
		tail -n 30 "$logf" >&2
		die "$name: cannot load $pkg in $moddir"
	fi
	total="$(wc -l <"$tmp/.$name.deps")"
	log "$name: building ($total packages, those not in the Go build cache are compiled)"
	if ! (cd "$moddir" && "$GO" build -v -trimpath -tags="$tags" -ldflags="$ldflags" -o "$tmp/$name" "$pkg" 2>&1) |
		progress "$name" "$total" "$logf"; then
		tail -n 40 "$logf" >&2
		die "$name: go build failed (full log above was $logf)"
	fi
	log "$name: built ($(du -h "$tmp/$name" | cut -f1), $(fmt_secs $((SECONDS - start))) so far)"
}

log "building $key into $dir with $("$GO" env GOVERSION) (the first build takes several minutes)"

build etcd "$here/etcd" go.etcd.io/etcd/server/v3 \
	"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=go-module-$etcd_version" ""
# etcdutl, for the safety row that restores etcd from a snapshot as an
# operator would (etcdutl snapshot restore --bump-revision).
build etcdutl "$here/etcd" go.etcd.io/etcd/etcdutl/v3 \
	"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=go-module-$etcd_version" ""

# The flags of the Kubernetes release build (hack/lib/golang.sh, version.sh).
kube_minor="${kube_version#v1.}"
kube_minor="${kube_minor%%.*}"
kube_date="$(cd "$here" && "$GO" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
	kube_ldflags+=" -X $pkg.gitCommit=go-module-$kube_version -X $pkg.gitTreeState=clean"
	[[ -z "$kube_date" ]] || kube_ldflags+=" -X $pkg.buildDate=$kube_date"
done
build kube-apiserver "$here" k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags" selinux,notest,grpcnotrace

answers "$tmp" || die "the new binaries do not report $key: $("$tmp/etcd" --version 2>&1 | head -1); $("$tmp/kube-apiserver" --version 2>&1 | head -1)"
rm -f "$tmp"/.*.log "$tmp"/.*.deps
chmod 755 "$tmp"
{
	echo "key $key"
	echo "kube-apiserver k8s.io/kubernetes $kube_version"
	echo "etcd go.etcd.io/etcd/server/v3 $etcd_version"
	echo "etcdutl go.etcd.io/etcd/etcdutl/v3 $etcd_version"
	echo "go $("$GO" env GOVERSION) $GOOS/$GOARCH"
	echo "pins $(pins)"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start))s"
} >"$tmp/.stamp"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
log "built $key in $(fmt_secs $((SECONDS - start))): $dir"
echo "$dir"
