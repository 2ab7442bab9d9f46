#!/usr/bin/env bash
# conformance.sh — run the Kubernetes e2e suite's [NodeConformance] specs
# against a nodelet node in a real cluster on this machine, offline. Long (an
# hour or more for the full selection); not part of scripts/test.sh.
#
# Usage: scripts/conformance.sh [FOCUS-REGEX] [-- extra e2e.test flags]
#
#   FOCUS-REGEX  ginkgo focus (default '\[NodeConformance\]'); the skip is
#                '\[Serial\]|\[Disruptive\]|\[Slow\]|\[Feature:|\[Alpha\]|\[Flaky\]'
#                (NODELET_CONFORMANCE_SKIP overrides it).
#   NODELET_CONFORMANCE_PROCS  specs run at once (default 4; 1 runs e2e.test
#                alone, without the ginkgo runner).
#
# Steps: scripts/setup.sh (packages, nodelet binaries); builds, once and
# cached next to kube-apiserver, kube-controller-manager, kube-scheduler,
# agnhost, nnp and e2e.test (scripts/controlplane.sh build-conformance: a cold
# build takes about 15 minutes on 2 cores); then bin/conformance starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, a private
# containerd, a registry.k8s.io stand-in on 127.0.0.1 and `nodelet up` as the
# cluster's only node, runs e2e.test, prints passed/failed/skipped and every
# failure, and tears all of it down again whatever happened. The JSON report,
# the suite's log and the list of images without a stand-in are kept under
# ${NODELET_CACHE:-~/.cache/nodelet}/conformance/ (the paths are printed).
#
# Exit status: 0 when every selected spec passed, 1 when some failed, 2 when
# the run could not be made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[[ $(id -u) -eq 0 ]] || { echo "conformance: run as root" >&2; exit 2; }

focus='\[NodeConformance\]'
if [[ $# -gt 0 && $1 != -- ]]; then
	focus=$1
	shift
fi
[[ ${1:-} == -- ]] && shift

scripts/setup.sh >&2
eval "$(scripts/controlplane.sh build-conformance | grep -E '^[A-Z_0-9]+=')"
go build -o bin/ ./scripts/conformance

args=(-k8s-bin "$(dirname "$E2E_TEST")" -nodelet-bin "$PWD/bin" -focus "$focus")
[[ -n ${NODELET_CONFORMANCE_SKIP:-} ]] && args+=(-skip "$NODELET_CONFORMANCE_SKIP")
[[ -n ${NODELET_CONFORMANCE_PROCS:-} ]] && args+=(-procs "$NODELET_CONFORMANCE_PROCS")
exec bin/conformance "${args[@]}" -- "$@"
