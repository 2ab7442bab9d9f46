#!/usr/bin/env bash
# bench.sh — measure nodelet's pod start-up and teardown against the raw CRI
# floor on a private containerd, and what the agent costs (internal/tools/bench).
# Needs root. Runs scripts/setup.sh first (idempotent: packages, binaries,
# images), then bin/nodelet-bench with the arguments given, e.g.
#
#   scripts/bench.sh                                   # N=1,20,50, 3 rounds, bounds 1,2,4,0
#   scripts/bench.sh -n 1,5 -rounds 2 -bounds 0,2      # a quick look
#   scripts/bench.sh -containerd 1 -n 20               # on Debian's containerd 1.6 (the
#                                                      # default is containerd 2.x, built
#                                                      # and cached by scripts/containerd2.sh)
#   KUBELET_BIN=/path/to/kubelet scripts/bench.sh      # another kubelet binary
#   NODELET_BENCH_KUBELET=0 scripts/bench.sh           # no kubelet contender
#
# The kubelet (v1.37.2, built from scripts/k8s like kube-apiserver and
# cached beside it: scripts/controlplane.sh tools kubelet) runs as the third
# contender beside nodelet and the floor. Prints a table; the JSON result
# goes to -out (default /tmp/nodelet-bench-result.json).
# NODELET_BENCH_SKIP_SETUP=1 skips setup when bin/ is known to be current.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (containerd, runc, CNI, cgroups)" >&2; exit 1; }

if [[ "${NODELET_BENCH_SKIP_SETUP:-0}" != 1 || ! -x bin/nodelet || ! -x bin/nodelet-bench ]]; then
	echo "== bench: setup (packages, binaries, images)" >&2
	scripts/setup.sh >&2
fi
if [[ -z "${KUBELET_BIN:-}" && "${NODELET_BENCH_KUBELET:-1}" != 0 ]]; then
	echo "== bench: kubelet (cached after the first build)" >&2
	KUBELET_BIN=$(scripts/controlplane.sh tools kubelet | sed -n 's/^KUBELET=//p')
	export KUBELET_BIN
fi
if [[ " $* " != *" -containerd 1 "* && " $* " != *" -containerd=1 "* ]]; then
	echo "== bench: containerd 2.x (cached after the first build)" >&2
	scripts/containerd2.sh build >/dev/null
fi
echo "== bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
exec bin/nodelet-bench -bin-dir bin "$@"
