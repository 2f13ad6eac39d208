# ILNPv6 host-mobility stack. `make demo` runs a handoff in the lab, `make test` runs all tests.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO    ?= go
export PATH := $(PATH):/usr/local/go/bin

# Every Fuzz target runs in `make test` for FUZZTIME executions (`make fuzz FUZZTIME=1m` for
# longer). A count, not a duration: with a duration, go1.26's fuzz coordinator can fail a target
# with a bare "context deadline exceeded" at the deadline (go.dev/issue/75804, fixed in go1.27).
FUZZTIME ?= 100000x

.PHONY: all deps generate build test unit fuzz bench lint demo results package clean

all: build

deps:
	@bash scripts/deps.sh

# bpf2go: compiles bpf/*.c with clang and writes the Go bindings next to the loader.
generate: deps
	$(GO) generate ./...

build: generate
	$(GO) build -o bin/ ./cmd/...

lint: generate
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt: $$unformatted"; exit 1; fi
	$(GO) vet ./...

# Unit, BPF_PROG_TEST_RUN and network-namespace tests, then every fuzz target briefly.
test: lint
	@bash scripts/test.sh
	@$(MAKE) --no-print-directory fuzz
	@cat out/tests-summary

fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for target in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | cut -d' ' -f2); do \
	    echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
	    out=$$($(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s $$pkg 2>&1) \
	      || { echo "$$out"; exit 1; }; \
	    echo "$$out" | grep -E 'execs: [0-9]+' | tail -n 1 || true; \
	  done; \
	done

bench: generate
	@mkdir -p bench/out
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./...

demo: build
	$(GO) run ./cmd/ilnp-lab demo

# README's results table and the thesis's figures (fig-3.15, fig-4.4 ... fig-5.11.png) regenerated
# into out/ (every figure with its command, n and 95 % interval). LONG: hours on 2 cores (the
# figures' 48 thesis-profile cells and the 3.3 loop, 3 reps each). RESULTS_ARGS narrows it, e.g.
# RESULTS_ARGS=--quick (under 20 minutes) or RESULTS_ARGS="--rows lan-udp --reps 1".
# Then ILNP beside MPTCP and WireGuard into out/peers/peers.{json,md} (issue 26; 105 thesis-profile
# runs at n = 3, 15 of them multihomed failovers: over an hour more; the quick profile took 38
# minutes); PEERS_ARGS narrows it, e.g. PEERS_ARGS="--scenarios lan-lan --reps 1 --profile quick".
results: build
	$(GO) run ./cmd/ilnp-lab results --out out $(RESULTS_ARGS)
	$(GO) run ./cmd/ilnp-lab peers --out out/peers $(PEERS_ARGS)

# The Debian package out/ilnp_VERSION_ARCH.deb: nfpm (as a library) packs dist/nfpm.yaml's
# files; the version comes from git describe (tools/package says how).
package: generate
	$(GO) run ./tools/package -out out

clean:
	rm -rf bin bench/out lab/out
	find . -name '*_bpfe[lb].*' -delete
