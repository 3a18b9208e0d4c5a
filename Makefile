# baton — build, test and benchmark targets.
#
#   make test    the whole suite, as CI runs it (installs what the tests need)
#   make test-loaded  the same while busy loops occupy every CPU
#                (tools/busy.sh), to check that the tests hold on a slow,
#                shared machine; it takes a few times longer
#   make demo    the three-replica demo on the file backend
#   make bench   every benchmark report (micro, Redis, Lease, scale, etcd),
#                the plots in docs/img and the generated blocks of
#                docs/benchmarks.md (about 17 minutes; run it on an idle
#                machine); BENCH_QUICK=1 for a smoke run that leaves docs/
#                alone (see bench/README.md)
#   make bench-micro  the acquire/release microbenchmarks of memory, file, root
#   make bench-redis  Redis beside bsm/redislock, redsync and the raw floor
#   make bench-kube   the Lease backend beside client-go leader election
#   make bench-etcd   the etcd backend beside etcd's concurrency package
#   make bench-scale  1, 100 and 10,000 held locks per backend, idle electors
#   make safety-report  the fault-injection suite (internal/safety), short
#                mode (~22-24 minutes; it also runs in make test), its
#                tables written into docs/safety.md
#   make safety-long  the same, long mode: eight rounds of every fault on
#                every backend (~46 minutes idle)
#   make mutants  plant each bug of internal/safety/mutants/*.patch in a
#                copy of the tree and require the safety suite to fail on
#                it, three runs each (MUTANT_RUNS); a table of the verdicts
#   make fuzz    run the record and name fuzzers for FUZZTIME each
#   make testbin build kube-apiserver and etcd for the tests (once; cached
#                outside the repo, see tools/testbin/build.sh)
#   make image   the container image, without Docker: an OCI layout in
#                dist/image/oci and a docker-load tarball dist/image/baton.tar
#                (see docs/kubernetes.md, "Building the image")

GO       ?= go
FUZZTIME ?= 30s
TESTFLAGS ?=

# MODULES are the Go modules the test targets run over, the root first (see
# docs/modules.md). Each sub-module's go.mod replaces its baton
# dependencies with the directories beside it, so every target tests the
# tree as it is. bench/, tools/testbin and tools/crdgen are modules of
# their own, outside this list: they have their own targets (make test
# still runs the unit tests of bench's harness, bench/internal, and checks
# that bench/probes' patches apply). tools/image's
# test builds and checks the container image (make image). tools/docscheck's
# test type-checks the Go blocks of README.md and docs/*.md.
MODULES = . internal/testenv kubestore deploy etcdstore redisstore fence batonprom schedule \
	adapter/batonlock adapter/gocronlock adapter/logrbridge cmd/baton internal/safety \
	tools/image tools/docscheck

# FOREACH_MODULE runs its argument in every module's directory and fails
# after the last one if any failed, so that one run reports every failure.
FOREACH_MODULE = failed=; for m in $(MODULES); do \
		echo "== module $$m" >&2; \
		(cd $$m && $(1)) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "failed in:$$failed" >&2; exit 1; fi

.PHONY: test test-loaded image deps vet demo bench bench-micro bench-redis bench-kube bench-etcd bench-scale safety-report safety-long mutants fuzz testbin packages

# TESTBIN builds (if needed) the kube-apiserver and etcd the tests start and
# prints their directory as its last line of stdout.
TESTBIN = bash tools/testbin/build.sh

# testbin builds them into the cache (tools/testbin/README.md; several
# minutes the first time, reused afterwards): the command a test names when
# it cannot find them (internal/testenv.TestbinHint), and part of deps.
testbin:
	@GO='$(GO)' $(TESTBIN) >/dev/null

# The binaries' directory is computed in the recipe, after deps has built
# them: KUBEBUILDER_ASSETS for envtest, BATON_ETCD_BIN for internal/testenv.
# -timeout is a hang guard per test binary. The slowest, the fault-injection
# suite (internal/safety), took 22 minutes in the fresh-clone CI runs of
# 2026-12-07 (1,321 and 1,352 s) and 24 under load (make safety-report
# beside three agents' builds, 1,427 s): the 30 minutes it had were too
# close. 45 minutes leaves it room on a slower machine and still ends a
# hang inside CI's 90-minute limit.
test: deps vet
	KUBEBUILDER_ASSETS="$$(GO='$(GO)' $(TESTBIN))" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN && \
	$(call FOREACH_MODULE,$(GO) test -race -timeout 45m $(TESTFLAGS) ./...)
	@echo "== bench's harness (bench/internal) and probes (bench/probes); the reports have their own targets" >&2
	cd bench && $(GO) test -race -timeout 5m $(TESTFLAGS) ./internal/... ./probes/...

# test-loaded runs make test beside one busy loop per CPU (BUSY=n to
# choose), killed when the tests end. -count=1: a result cached from an
# idle run would prove nothing. The loops halve the CPU the tests get, so
# the per-package hang guard (-timeout) is doubled to match.
test-loaded:
	sh tools/busy.sh $(MAKE) test TESTFLAGS='-count=1 -timeout 90m $(TESTFLAGS)'

# deps installs what the tests need on a fresh machine: the Go modules, and
# the store servers the tests start (etcd and kube-apiserver built by
# testbin; Debian packages are added here as their backends land).
deps: testbin packages
	$(call FOREACH_MODULE,$(GO) mod download)

# packages installs the Debian packages whose servers the tests start
# (redis-server, and nutcracker to show that baton names twemproxy;
# PostgreSQL and PgBouncer for the fence helpers), as root, or through
# sudo for a developer. A package is installed only if its server is missing.
packages:
	@missing=; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	command -v nutcracker >/dev/null 2>&1 || [ -x /usr/sbin/nutcracker ] || missing="$$missing nutcracker"; \
	if [ -n "$$missing" ]; then \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		echo "installing$$missing" >&2; \
		$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

# image writes the baton container image without a Docker daemon and without
# pulling a base: tools/image/rootfs.sh builds the static binary and the file
# tree (the one place the build flags are written; the Dockerfile runs it
# too), and tools/image (its own module) packs the tree into IMAGE_OUT.
# Debian's ca-certificates package provides the CA bundle.
IMAGE     ?= localhost/baton:dev
IMAGE_OUT ?= dist/image
image:
	@[ -s /etc/ssl/certs/ca-certificates.crt ] || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		echo "installing ca-certificates" >&2; \
		$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates; }
	rm -rf '$(IMAGE_OUT)' && mkdir -p '$(IMAGE_OUT)'
	GO='$(GO)' GOARCH="$$($(GO) env GOARCH)" sh tools/image/rootfs.sh '$(IMAGE_OUT)/rootfs'
	out="$$(cd '$(IMAGE_OUT)' && pwd)" && cd tools/image && $(GO) run . \
		-rootfs "$$out/rootfs" -name '$(IMAGE)' -platform "linux/$$($(GO) env GOARCH)" \
		-oci "$$out/oci" -tar "$$out/baton.tar"

vet:
	$(call FOREACH_MODULE,$(GO) vet ./...)

demo:
	$(GO) -C cmd/baton run . demo

bench: testbin packages
	KUBEBUILDER_ASSETS="$$(GO='$(GO)' $(TESTBIN))" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN && \
	GO='$(GO)' bash bench/run.sh

bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./memstore ./filestore .

bench-scale: testbin packages
	cd bench && KUBEBUILDER_ASSETS="$$(GO='$(GO)' bash ../tools/testbin/build.sh)" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN CI=true && \
		$(GO) test -run TestScaleReport -count=1 -timeout 25m -v .

# bench-redis runs baton's Redis backend beside bsm/redislock, redsync and
# the raw floor on one redis-server (bench/ is its own module).
bench-redis: packages
	cd bench && CI=true $(GO) test -run TestRedisReport -count=1 -v .

# bench-kube runs baton's Lease backend beside client-go's leader election
# on one envtest API server (about five minutes).
bench-kube: testbin
	cd bench && KUBEBUILDER_ASSETS="$$(GO='$(GO)' bash ../tools/testbin/build.sh)" CI=true \
		$(GO) test -run TestKubeReport -count=1 -timeout 15m -v .

# bench-etcd runs baton's etcd backend beside etcd's concurrency.Mutex and
# Election on one etcd member (a few minutes).
bench-etcd: testbin
	cd bench && BATON_ETCD_BIN="$$(GO='$(GO)' bash ../tools/testbin/build.sh)/etcd" CI=true \
		$(GO) test ./etcd -run TestEtcdReport -count=1 -timeout 20m -v

# safety-report runs the fault-injection suite's short mode and
# safety-long its long mode; both write their tables into docs/safety.md
# between the <!-- safety:begin --> and <!-- safety:end --> markers. The
# long mode took 46 minutes on an idle two-core machine (2026-12-04): its
# hang guard leaves room for a busy one.
SAFETY_REPORT ?= /tmp/baton-safety.md
SAFETY_SPLICE = awk -v f=$(SAFETY_REPORT) \
	'BEGIN { while ((getline l < f) > 0) r = r l "\n" } \
	 /<!-- safety:begin -->/ { print; printf "%s", r; skip = 1; next } \
	 /<!-- safety:end -->/ { skip = 0 } !skip' docs/safety.md > docs/safety.md.new && \
	mv docs/safety.md.new docs/safety.md
safety-report: deps
	KUBEBUILDER_ASSETS="$$(GO='$(GO)' $(TESTBIN))" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN && \
	CI=true BATON_SAFETY_REPORT=$(SAFETY_REPORT) \
		$(GO) -C internal/safety test -race -count=1 -timeout 45m -v .
	$(SAFETY_SPLICE)
safety-long: deps
	KUBEBUILDER_ASSETS="$$(GO='$(GO)' $(TESTBIN))" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN && \
	CI=true BATON_SAFETY_LONG=1 BATON_SAFETY_REPORT=$(SAFETY_REPORT) \
		$(GO) -C internal/safety test -race -count=1 -timeout 150m -v .
	$(SAFETY_SPLICE)

# mutants runs internal/safety/mutants.sh: each planted bug must make the
# safety suite's short mode fail (the real tree is never modified).
mutants: deps
	KUBEBUILDER_ASSETS="$$(GO='$(GO)' $(TESTBIN))" && \
	BATON_ETCD_BIN="$$KUBEBUILDER_ASSETS/etcd" && \
	export KUBEBUILDER_ASSETS BATON_ETCD_BIN && \
	GO='$(GO)' bash internal/safety/mutants.sh

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime $(FUZZTIME) ./filestore
	$(GO) test -run '^$$' -fuzz FuzzValidateName -fuzztime $(FUZZTIME) .
	cd etcdstore && $(GO) test -run '^$$' -fuzz FuzzDecodeValue -fuzztime $(FUZZTIME) .
	cd redisstore && $(GO) test -run '^$$' -fuzz FuzzDecodeLockValue -fuzztime $(FUZZTIME) .
	cd kubestore && $(GO) test -run '^$$' -fuzz FuzzDecodeConfigMap -fuzztime $(FUZZTIME) .
	cd kubestore && $(GO) test -run '^$$' -fuzz FuzzDecodeLease -fuzztime $(FUZZTIME) .
