#!/usr/bin/env bash
# soak.sh — a node of a real cluster on this machine kept at its pod limit
# (110) through thousands of pod lifecycles: Deployments scaled and rolled,
# Jobs, bare pods, probes, every kind of volume, restarts. Every few seconds
# it samples each agent process's PSS/RSS, goroutines and open fds, the bus
# store per stream, and what pods leave on the node (containers, sandboxes,
# mounts, pod cgroups, CNI leases, iptables rules, veths, pod dirs); it
# reports the growth per 1,000 lifecycles after a warm-up, what is left once
# the node is drained, and whether every event the agent produced reached
# the API; then the kubelet runs the same churn for the figures side by side.
# Not part of scripts/test.sh. Root. Internals: internal/tools/soak.
#
#   scripts/soak.sh                              nodelet then the kubelet, 5,000 lifecycles each
#   scripts/soak.sh -short                       a quick check: 20 pods, 60 lifecycles
#   scripts/soak.sh -agent nodelet -lifecycles 1000 -duration 30m
#   scripts/soak.sh -h                           every flag
#   kill -USR1 <pid of bin/soak>                 end the churn now: drain, then the figures so far
#
# Writes result.json and a plot per agent (and compare.png) to -out
# (default /tmp/nodelet-soak). One cluster runs on the machine at a time:
# the soak waits for another (-wait, default 2h).
# NODELET_SOAK_BIN=DIR takes the nodelet binaries from DIR instead of
# building them (e.g. from a clean worktree).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[[ $(id -u) -eq 0 ]] || { echo "soak: run as root" >&2; exit 2; }

if [[ -z "${NODELET_SOAK_BIN:-}" ]]; then
	scripts/setup.sh >&2
	NODELET_SOAK_BIN=$PWD/bin
fi
eval "$(scripts/controlplane.sh tools kube-controller-manager kube-scheduler kube-proxy kubelet | grep -E '^[A-Z_0-9]+=')"
go build -o bin/ ./scripts/soak
exec bin/soak -k8s-bin "$(dirname "$KUBE_PROXY")" -nodelet-bin "$NODELET_SOAK_BIN" "$@"
