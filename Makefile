# baton — build, test and benchmark targets.
#
#   make test    the whole suite, as CI runs it (installs what the tests need)
#   make demo    the three-replica demo on the file backend
#   make bench   the acquire/release benchmarks (figures in docs/benchmarks.md)
#   make fuzz    run the record and name fuzzers for FUZZTIME each

GO       ?= go
FUZZTIME ?= 30s
TESTFLAGS ?=

.PHONY: test deps vet demo bench fuzz

test: deps vet
	$(GO) test -race -timeout 20m $(TESTFLAGS) ./...

# deps installs what the tests need on a fresh machine. Today the suite needs
# only Go; store servers (redis-server, etcd, kube-apiserver) are added here
# as their backends land.
deps:
	$(GO) mod download

vet:
	$(GO) vet ./...

demo:
	$(GO) run ./cmd/baton demo

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./memory ./file .

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime $(FUZZTIME) ./file
	$(GO) test -run '^$$' -fuzz FuzzValidateName -fuzztime $(FUZZTIME) .
