#!/bin/sh
# busy.sh runs a command while busy loops occupy every CPU, to check that
# the tests hold on a slow, shared machine (make test-loaded).
#
#   tools/busy.sh make test
#   BUSY=4 tools/busy.sh go test -race -count=1 -run Conformance ./kubestore
#
# BUSY is the number of loops (default: nproc). The loops are killed when
# the command ends, however it ends; the exit status is the command's.
set -eu
[ $# -gt 0 ] || { echo "usage: $0 command [args...]" >&2; exit 2; }
n=${BUSY:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)}
pids=
stop() {
	[ -z "$pids" ] || kill $pids 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
i=0
while [ "$i" -lt "$n" ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	i=$((i + 1))
done
echo "busy.sh: $n busy loops (pids$pids) while running: $*" >&2
start=$(date +%s)
rc=0
"$@" || rc=$?
echo "busy.sh: '$*' exited $rc after $(($(date +%s) - start))s" >&2
exit "$rc"
