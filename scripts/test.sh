#!/usr/bin/env bash
# test.sh — run every nodelet test: unit tests, and integration tests against
# the real embedded NATS, a private containerd per test binary, and a real
# kube-apiserver + etcd on loopback. Needs root (containers). Exits non-zero
# on any failure.
#
#   scripts/test.sh            everything
#   scripts/test.sh ./bus/...  only these packages (setup still runs)
#
# Environment: NODELET_TEST_RACE=0 turns off the race detector;
# NODELET_TEST_TIMEOUT (default 25m) bounds the go test run;
# NODELET_TEST_CONTAINERD=1 runs the tests on Debian's containerd 1.6
# instead of containerd 2.x (docs/runtimes.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin

step() { echo "== test: $*" >&2; }

step "setup (packages, binaries, images)"
scripts/setup.sh

step "control plane binaries (cached after the first build)"
scripts/controlplane.sh build >/dev/null
# What the conformance harness's own test (scripts/conformance) runs besides
# the control plane, the kubelet the bench's test runs beside nodelet, and
# the multi-node cluster's kube-proxy and CoreDNS (internal/cluster's test
# serves names with it); e2e.test itself is only built by
# scripts/conformance.sh.
scripts/controlplane.sh tools kube-controller-manager kube-scheduler agnhost nnp kubelet kube-proxy coredns >/dev/null

step "gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './scripts/k8s/*'))
if [[ -n "$unformatted" ]]; then
	echo "gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...

pkgs=("$@")
[[ ${#pkgs[@]} -eq 0 ]] && pkgs=(./...)
race=(-race)
[[ "${NODELET_TEST_RACE:-1}" == 0 ]] && race=()
step "go test ${race[*]} ${pkgs[*]}"
start=$(date +%s)
go test "${race[@]}" -count=1 -timeout "${NODELET_TEST_TIMEOUT:-25m}" "${pkgs[@]}"
step "passed in $(( $(date +%s) - start ))s"

# The matrix (docs/runtimes.md): every runtime-facing test above ran on
# containerd 2.x, the default; these run nodelet-runtime on Debian's
# containerd 1.6 as well (pod start, exits and restarts through containerd's
# task events, liveness kills, image pulls). The whole packages on 1.6:
# NODELET_TEST_CONTAINERD=1 scripts/test.sh ./services/...
if [[ ${#@} -eq 0 && "${NODELET_TEST_CONTAINERD:-2}" != 1 ]]; then
	step "containerd 1.6: nodelet-runtime's pod lifecycle"
	start=$(date +%s)
	NODELET_TEST_CONTAINERD=1 go test "${race[@]}" -count=1 -timeout 10m ./services/runtime/ \
		-run '^(TestBurstOfTenPods|TestCrashLoopRestartCountGrows|TestImagePullPolicies|TestLivenessFailureRestartsContainer)$'
	step "containerd 1.6 passed in $(( $(date +%s) - start ))s"
fi
