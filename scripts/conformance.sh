#!/usr/bin/env bash
# conformance.sh — run the Kubernetes e2e suite against a cluster of nodelet
# nodes on this machine (scripts/cluster.sh's), offline: by default its
# [NodeConformance] specs, with --conformance every [Conformance] spec (the
# whole suite a distribution is certified by). Long (an hour or more); not
# part of scripts/test.sh.
#
# Usage: scripts/conformance.sh [--conformance | --dra] [--agent nodelet|kubelet]
#                               [--nodes N] [--containerd 1|2] [FOCUS-REGEX]
#                               [-- extra e2e.test flags]
#
#   FOCUS-REGEX    ginkgo focus (default '\[NodeConformance\]'); the skip is
#                  '\[Serial\]|\[Disruptive\]|\[Slow\]|\[Feature:|\[Alpha\]|\[Flaky\]'
#                  (NODELET_CONFORMANCE_SKIP overrides it).
#   --conformance  every [Conformance] spec but Sonobuoy's certified-conformance
#                  skips ([Disruptive], NoExecuteTaintManager): the non-[Serial]
#                  ones in parallel, then the [Serial] ones one at a time.
#   --dra          the suite's DRA specs ('\[DRA\]', the kubelet's included;
#                  skipped: feature gates off by default, [Serial], [Slow]…)
#                  on one node whose root dir is the host's /var/lib/kubelet
#                  (the suite's driver pod mounts it by hostPath), on
#                  containerd 2 (CDI) unless --containerd says otherwise.
#   --agent        the node agent: nodelet (default), or the kubelet v1.37.2 on
#                  the same nodes, to count it beside nodelet.
#   --nodes        nodes of the cluster (default 2).
#   --containerd   every node's containerd: 2, containerd 2.x (default; built
#                  and cached by scripts/containerd2.sh), or 1, Debian's 1.6.
#   NODELET_CONFORMANCE_PROCS  specs run at once (default 4; 1 runs e2e.test
#                  alone, without the ginkgo runner).
#
# Steps: scripts/setup.sh (packages, nodelet binaries); builds, once and
# cached next to kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy, the kubelet, CoreDNS, agnhost, nnp and e2e.test
# (scripts/controlplane.sh: a cold build takes about 20 minutes on 2 cores);
# then bin/conformance starts the cluster (internal/cluster) with a
# registry.k8s.io stand-in on 127.0.0.1, runs e2e.test, prints
# passed/failed/skipped and every failure, and tears all of it down again
# whatever happened. The JSON reports, the suite's logs and the list of
# images without a stand-in are kept under
# ${NODELET_CACHE:-~/.cache/nodelet}/conformance/ (the paths are printed).
#
# Exit status: 0 when every selected spec passed, 1 when some failed, 2 when
# the run could not be made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[[ $(id -u) -eq 0 ]] || { echo "conformance: run as root" >&2; exit 2; }

args=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--conformance) args+=(-conformance); shift ;;
	--dra) args+=(-dra); shift ;;
	--agent) args+=(-agent "$2"); shift 2 ;;
	--agent=*) args+=(-agent "${1#*=}"); shift ;;
	--nodes) args+=(-nodes "$2"); shift 2 ;;
	--nodes=*) args+=(-nodes "${1#*=}"); shift ;;
	--containerd) args+=(-containerd "$2"); shift 2 ;;
	--containerd=*) args+=(-containerd "${1#*=}"); shift ;;
	--) break ;;
	*) args+=(-focus "$1"); shift ;;
	esac
done
[[ ${1:-} == -- ]] && shift

scripts/setup.sh >&2
eval "$(scripts/controlplane.sh build-conformance | grep -E '^[A-Z_0-9]+=')"
scripts/controlplane.sh tools kube-proxy kubelet coredns >/dev/null
go build -o bin/ ./scripts/conformance

args+=(-k8s-bin "$(dirname "$E2E_TEST")" -nodelet-bin "$PWD/bin")
[[ -n ${NODELET_CONFORMANCE_SKIP:-} ]] && args+=(-skip "$NODELET_CONFORMANCE_SKIP")
[[ -n ${NODELET_CONFORMANCE_PROCS:-} ]] && args+=(-procs "$NODELET_CONFORMANCE_PROCS")
exec bin/conformance "${args[@]}" -- "$@"
