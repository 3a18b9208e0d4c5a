#!/usr/bin/env bash
# mutants.sh plants known bugs in copies of the repository, one at a time,
# and requires the fault-injection suite (internal/safety, short mode) to
# fail on each: the suite's checks must have teeth.
#
# Each mutant is a patch in internal/safety/mutants/*.patch whose header
# names it ("mutant mN: what it breaks") and the subtests that must catch
# it ("run: REGEXP" for go test -run). For each mutant and each of RUNS
# runs (MUTANT_RUNS, default 3), the working tree (tracked and untracked,
# not ignored, files) is copied to a temporary directory, the patch is
# applied there, and the subtests run with -race; the real tree is never
# modified. A mutant is caught if every run failed. It prints a table and
# exits non-zero if any mutant survived (or did not build, or its patch
# did not apply).
#
# The Kubernetes, etcd and Redis stores come from the environment as for
# the suite itself: KUBEBUILDER_ASSETS, BATON_ETCD_BIN, CI=true (make
# mutants sets them). Logs go to MUTANT_LOGS (default /tmp/baton-mutants).
# MUTANTS="m1 m3" runs only those. MUTANT_BASELINE=1 first runs each
# mutant's subtests once on the unpatched copy, which must pass (else the
# mutant's verdict says so: a failure would prove nothing).
set -euo pipefail

GO=${GO:-go}
runs=${MUTANT_RUNS:-3}
logs=${MUTANT_LOGS:-/tmp/baton-mutants}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
mkdir -p "$logs"

# The copy lives at one fixed path (MUTANT_TREE), so that the packages a
# mutant does not touch come from the build cache in every run.
tree=${MUTANT_TREE:-/tmp/baton-mutant-tree}
case $tree in /tmp/?*) ;; *) echo "mutants: MUTANT_TREE must be under /tmp" >&2; exit 2 ;; esac
trap 'rm -rf "$tree"' EXIT

# copy makes a fresh copy of the working tree in $tree.
copy() {
	rm -rf "$tree"
	mkdir -p "$tree"
	(cd "$root" && git ls-files -z --cached --others --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
}

table=()
survived=0
# In numeric order (m2 before m10).
mapfile -t patches < <(printf '%s\n' "$root"/internal/safety/mutants/m*.patch | sort -V)
for patch in "${patches[@]}"; do
	id=$(basename "$patch" .patch)
	id=${id%%-*}
	if [ -n "${MUTANTS:-}" ] && ! [[ " $MUTANTS " == *" $id "* ]]; then
		continue
	fi
	what=$(sed -n 's/^mutant [^:]*: //p' "$patch" | head -1)
	run=$(sed -n 's/^run: //p' "$patch" | head -1)
	failed=0
	verdict=
	if [ "${MUTANT_BASELINE:-0}" = 1 ]; then
		copy
		log="$logs/$id.baseline.log"
		echo "mutants: $id baseline (unpatched): go -C internal/safety test -race -run '$run' . (log: $log)" >&2
		if ! (cd "$tree/internal/safety" && CI=true "$GO" test -race -count=1 -timeout 20m -run "$run" .) >"$log" 2>&1; then
			verdict="baseline FAILS unpatched (see $log)"
		fi
	fi
	for i in $(seq 1 "$runs"); do
		[ -z "$verdict" ] || break
		copy
		log="$logs/$id.$i.log"
		if ! patch -s -p1 -d "$tree" <"$patch" >"$log" 2>&1; then
			verdict="patch did not apply (see $log)"
			break
		fi
		echo "mutants: $id run $i/$runs: go -C internal/safety test -race -run '$run' . (log: $log)" >&2
		set +e
		(cd "$tree/internal/safety" && CI=true "$GO" test -race -count=1 -timeout 20m -run "$run" .) >>"$log" 2>&1
		rc=$?
		set -e
		if grep -q '\[build failed\]\|\[setup failed\]' "$log"; then
			verdict="did not build (see $log)"
			break
		fi
		if [ $rc -ne 0 ]; then
			failed=$((failed + 1))
			# What caught it: the first few reports.
			grep -m 3 -E '^\s+\S+_test\.go:[0-9]+: ' "$log" | sed 's/^\s*/    /' >&2 || true
		else
			echo "    the suite PASSED with mutant $id" >&2
		fi
	done
	if [ -z "$verdict" ]; then
		if [ "$failed" -eq "$runs" ]; then
			verdict="caught ($failed/$runs runs failed)"
		else
			verdict="NOT caught ($failed/$runs runs failed)"
		fi
	fi
	[[ $verdict == caught* ]] || survived=$((survived + 1))
	table+=("| $id | $what | \`$run\` | $verdict |")
done

echo
echo "| mutant | bug | subtests | verdict |"
echo "|---|---|---|---|"
printf '%s\n' "${table[@]}"
if [ "$survived" -gt 0 ]; then
	echo "mutants: $survived mutant(s) not caught" >&2
	exit 1
fi
