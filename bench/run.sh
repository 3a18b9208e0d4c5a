#!/usr/bin/env bash
# run.sh: every benchmark report in one go, then the plots and
# docs/benchmarks.md. Called by `make bench`, which builds the test
# binaries and sets KUBEBUILDER_ASSETS and BATON_ETCD_BIN.
#
#   KUBEBUILDER_ASSETS=... BATON_ETCD_BIN=... bash bench/run.sh
#   BENCH_QUICK=1 ... bash bench/run.sh     # smoke run, a few minutes
#
# Each report writes Markdown (BENCH_OUT) and, for the Lease and scale
# reports, JSON beside it; cmd/report draws docs/img/*.png from the JSON and
# splices each Markdown fragment into docs/benchmarks.md between its
# "<!-- bench:NAME:begin -->" / "<!-- bench:NAME:end -->" markers, leaving
# the prose around them as written. A BENCH_QUICK run writes its document
# and plots into the output directory only, so smoke figures never reach
# docs/.
#
# Environment: GO (default go), BENCH_DIR (output directory; default a new
# temporary one), BENCH_ONLY (space-separated subset of: micro redis kube
# scale etcd).
set -euo pipefail

GO=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/baton-bench.XXXXXX")}
mkdir -p "$out"
only=${BENCH_ONLY:-micro redis kube scale etcd}
export CI=true # a store that cannot start fails the run instead of skipping

: "${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS (make bench does: tools/testbin/build.sh)}"
: "${BATON_ETCD_BIN:?set BATON_ETCD_BIN (make bench does: \$KUBEBUILDER_ASSETS/etcd)}"
export KUBEBUILDER_ASSETS BATON_ETCD_BIN

want() { [[ " $only " == *" $1 "* ]]; }

step() { # step NAME COMMAND...: run, log to $out/NAME.log, report the time
	local name=$1 start=$SECONDS
	shift
	echo "== $name (log: $out/$name.log)"
	if ! "$@" >"$out/$name.log" 2>&1; then
		tail -n 40 "$out/$name.log" >&2
		echo "== $name FAILED after $((SECONDS - start))s" >&2
		exit 1
	fi
	echo "== $name done in $((SECONDS - start))s"
}

micro_count=5 micro_time=1s
if [[ -n ${BENCH_QUICK:-} ]]; then
	micro_count=1 micro_time=100ms
fi

if want micro; then
	{
		echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
		"$GO" version
		echo "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the start (the machine may be shared: times are noisy)"
	} >"$out/micro.txt"
	step micro bash -c "set -o pipefail; cd '$root' && '$GO' test -run '^\$' -bench . -benchmem -count $micro_count -benchtime $micro_time ./memstore ./filestore . | tee -a '$out/micro.txt'"
fi
cd "$here"
if want redis; then
	step redis env BENCH_OUT="$out/redis.md" "$GO" test -run TestRedisReport -count=1 -timeout 15m -v .
fi
if want kube; then
	step kube env BENCH_OUT="$out/kube.md" "$GO" test -run TestKubeReport -count=1 -timeout 25m -v .
fi
if want scale; then
	step scale env BENCH_OUT="$out/scale.md" "$GO" test -run TestScaleReport -count=1 -timeout 25m -v .
fi
if want etcd; then
	step etcd env BENCH_OUT="$out/etcd.md" "$GO" test ./etcd -run TestEtcdReport -count=1 -timeout 20m -v
fi

doc=$root/docs/benchmarks.md img=$root/docs/img
if [[ -n ${BENCH_QUICK:-} ]]; then
	cp "$doc" "$out/benchmarks.md"
	doc=$out/benchmarks.md img=$out/img
fi
args=(-doc "$doc" -img "$img")
if [[ -f $out/micro.txt ]]; then
	args+=(-micro "$out/micro.txt" -micro-out "$out/micro.md" -frag "micro=$out/micro.md")
fi
[[ -f $out/kube.json ]] && args+=(-kube "$out/kube.json")
[[ -f $out/scale.json ]] && args+=(-scale "$out/scale.json")
for f in redis kube scale etcd; do
	[[ -f $out/$f.md ]] && args+=(-frag "$f=$out/$f.md")
done
"$GO" run ./cmd/report "${args[@]}"
echo "== wrote $doc and $img/*.png (reports in $out)"
