#!/usr/bin/env bash
# bench.sh — measure nodelet's pod start-up and teardown against the raw CRI
# floor on a private containerd, and what the agent costs (services/bench).
# Needs root. Runs scripts/setup.sh first (idempotent: packages, binaries,
# images), then bin/nodelet-bench with the arguments given, e.g.
#
#   scripts/bench.sh                                   # N=1,20,50, 3 rounds, bounds 1,2,4,0
#   scripts/bench.sh -n 1,5 -rounds 2 -bounds 0,2      # a quick look
#   KUBELET_BIN=/path/to/kubelet scripts/bench.sh      # a real kubelet as third contender
#
# Prints a table; the JSON result goes to -out (default
# /tmp/nodelet-bench-result.json). NODELET_BENCH_SKIP_SETUP=1 skips setup
# when bin/ is known to be current.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (containerd, runc, CNI, cgroups)" >&2; exit 1; }

if [[ "${NODELET_BENCH_SKIP_SETUP:-0}" != 1 || ! -x bin/nodelet || ! -x bin/nodelet-bench ]]; then
	echo "== bench: setup (packages, binaries, images)" >&2
	scripts/setup.sh >&2
fi
echo "== bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
exec bin/nodelet-bench -bin-dir bin "$@"
