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

.PHONY: all simulate test testenv deps lint fmt bench clean-testenv soak soak-chart bench-restart fuzz test-versions bench-conflicts bench-chart-settings chaos-chart

# The oldest supported Kubernetes version: `make test` also runs the version
# suite and the score parity test on it (the newest is testenv's default).
# `make test-versions` runs the suite on every supported version.
OLDEST_K8S := v1.34

all: test

## simulate: run Convoy on the embedded cluster with the bundled example (no set-up).
simulate:
	$(CARGO) run --release -p convoy-scheduler -- simulate --cluster config/examples/cluster.yaml

## deps: check the toolchains and fetch every dependency (Go modules, crates).
deps:
	@scripts/check-toolchain.sh
	cd testenv && go mod download
	cd testenv/versions/$(OLDEST_K8S) && go mod download
	cd testenv/etcd && go mod download
	cd testenv/kwok && go mod download
	cd testenv/helm && go mod download
	cd testenv/kueue && go mod download
	$(CARGO) fetch --locked

## testenv: build (or reuse) kube-apiserver, kube-scheduler, kube-controller-manager, kubectl (newest and oldest supported version), etcd, kwok, helm and kueue.
testenv: deps
	testenv/testenv build
	testenv/testenv --version $(OLDEST_K8S) build

## test: everything CI runs: builds testenv and the test binaries (at once), then all Rust tests (unit, embedded, real API server) on the newest Kubernetes version (while the oldest version's binaries build at low priority), then the version suite and score parity on the oldest.
test: deps
	CARGO=$(CARGO) scripts/build-for-tests.sh $(OLDEST_K8S)
	$(CARGO) test --workspace --locked --no-fail-fast
	@# Started in the background by build-for-tests.sh: waits for it (its lock), or builds it here if that failed.
	testenv/testenv --version $(OLDEST_K8S) build >/dev/null
	@# --workspace, not -p convoy-scheduler: the same features as the build above, so nothing is compiled again.
	TESTENV_VERSION=$(OLDEST_K8S) $(CARGO) test --workspace --locked --test versions --test parity

## test-versions: the version suite and score parity on every supported Kubernetes version (builds each; about 7 min per version the first time).
test-versions:
	@scripts/check-toolchain.sh
	@set -e; for v in $$(testenv/testenv versions); do \
	  echo "=== Kubernetes $$v"; \
	  testenv/testenv --version $$v build >/dev/null; \
	  TESTENV_VERSION=$$v $(CARGO) test --workspace --locked --test versions --test parity; \
	done

## chaos-chart: the chaos tests with the Helm chart's client and lease settings (qps 50, burst 100, lease 15 s, renew deadline 10 s, retry 2 s) instead of the fast ones.
chaos-chart: testenv
	CONVOY_CHAOS_SETTINGS=chart $(CARGO) test -p convoy-scheduler --locked --test chaos -- --nocapture

## bench-chart-settings: two replicas at the chart's client and lease settings, 500 nodes, a burst of 6,000 pods: lease losses (target 0) and the binding rate (CONVOY_BURST_QPS, CONVOY_BURST_BURST, CONVOY_BURST_NODES, CONVOY_BURST_PODS).
bench-chart-settings: testenv
	$(CARGO) test --release -p convoy-scheduler --locked --test e2e_lease_budget -- --ignored --nocapture burst_at_the_charts_settings

## bench-conflicts: Convoy beside kube-scheduler on hollow nodes (real kubelet admission), against two kube-schedulers: pods rejected per 1,000 placed (CONFLICT_NODES, CONFLICT_PODS per scheduler, CONFLICT_ROUNDS).
bench-conflicts: testenv
	$(CARGO) test --release -p convoy-scheduler --locked --test e2e_kubelet -- --ignored --nocapture conflicts_beside_kube_scheduler

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

## soak-chart: the soak with the Helm chart's client and lease settings and grace period.
soak-chart: testenv
	CONVOY_CHAOS_SETTINGS=chart $(CARGO) test -p convoy-scheduler --test chaos --locked -- --ignored --nocapture soak_random_faults

## bench-restart: cold start and failover (warm standby, delayCacheUntilActive) at 5,000 nodes and 100,000 pods, beside kube-scheduler (CONVOY_SCALE_NODES, CONVOY_SCALE_PODS, CONVOY_SCALE_BATCH, CONVOY_SCALE_ROUNDS, CONVOY_SCALE_TOKEN_VOLUME).
bench-restart: testenv
	$(CARGO) test --release -p convoy-scheduler --locked --test e2e_restart_at_scale -- --ignored --nocapture restart_and_failover_at_scale
