#!/usr/bin/env bash
# run.sh NAME: runs the probe bench/probes/NAME.patch on a copy of the
# working tree (tracked and untracked, not ignored, files), never on the
# tree itself: the patch adds timestamps to library code, which must not
# ship, and a test that prints them. See bench/probes/README.md.
#
#   bash bench/probes/run.sh handover
#   PROBE_HANDOVERS=400 bash bench/probes/run.sh handover
#
# redis-server must be on PATH (make deps installs it).
set -euo pipefail

GO=${GO:-go}
name=${1:?usage: run.sh NAME (a bench/probes/NAME.patch)}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
patch=$root/bench/probes/$name.patch
[ -f "$patch" ] || { echo "probes: no $patch" >&2; exit 2; }
run=$(sed -n 's/^run: //p' "$patch" | head -1)

tree=$(mktemp -d "${TMPDIR:-/tmp}/baton-probe.XXXXXX")
trap 'rm -rf "$tree"' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
if ! (cd "$tree" && git apply "$patch"); then
	echo "probes: $name.patch no longer applies: make its change to the current code and write it again (git diff, keeping its header lines)" >&2
	exit 1
fi
cd "$tree/bench"
"$GO" test -count=1 -timeout 10m -run "${run:?the patch has no run: line}" -v .
