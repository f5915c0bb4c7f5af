# Convoy: the two commands a newcomer needs are `make simulate` and `make test`.
SHELL := /usr/bin/env bash
CARGO ?= cargo

# Temporary files (test clusters, helm's home, fuzz scratch) go to $TMPDIR. A
# machine without a writable /tmp (a CI runner has had none) gets one under
# target/, so every target below works there too.
ifeq ($(TMPDIR),)
ifneq ($(shell test -d /tmp && test -w /tmp && echo ok),ok)
export TMPDIR := $(CURDIR)/target/tmp
$(shell mkdir -p $(TMPDIR))
endif
endif

.PHONY: all simulate test testenv deps lint fmt bench clean-testenv soak fuzz

all: test

## simulate: run Convoy on the embedded cluster with the bundled example (no set-up).
simulate:
	$(CARGO) run --release -p convoy-scheduler -- simulate --cluster config/examples/cluster.yaml

## deps: check the toolchains and fetch every dependency (Go modules, crates).
deps:
	@scripts/check-toolchain.sh
	cd testenv && go mod download
	cd testenv/etcd && go mod download
	cd testenv/kwok && go mod download
	cd testenv/helm && go mod download
	$(CARGO) fetch --locked

## testenv: build (or reuse) kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd, kwok and helm.
testenv: deps
	testenv/testenv build

## test: everything CI runs: builds testenv, then all Rust tests (unit, embedded, real API server).
test: testenv
	$(CARGO) test --workspace --locked

## fuzz: a short fuzz run of the input loaders (nightly + cargo-fuzz; FUZZ_SECONDS per target, default 30).
fuzz:
	scripts/fuzz.sh

## lint: formatting and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

## soak: the chaos suite's long run (random faults for CONVOY_CHAOS_SOAK_SECS, default 600 s; docs/reliability.md).
soak: testenv
	$(CARGO) test -p convoy-scheduler --test chaos --locked -- --ignored --nocapture soak_random_faults
