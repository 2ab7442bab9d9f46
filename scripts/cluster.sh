#!/usr/bin/env bash
# cluster.sh — a cluster of several nodes on this machine, offline: the
# control plane on the host (etcd, kube-apiserver, kube-controller-manager
# with node IPAM, kube-scheduler), and per node its own network and UTS
# namespace, containerd, node agent (nodelet, or the kubelet to compare) and
# kube-proxy, with routes between the nodes' pod ranges and cluster DNS as
# kubeadm deploys it. Not part of scripts/test.sh. Root.
#
# Usage: scripts/cluster.sh up [-nodes N] [-agent nodelet|kubelet] [-containerd 1|2]
#        scripts/cluster.sh status
#        scripts/cluster.sh down
#
#   up      build what is missing (scripts/setup.sh, the control plane's
#           tools, CoreDNS), start the cluster in the background and return
#           once every node is Ready and cluster DNS answers; prints the
#           admin kubeconfig (default 2 nodes, nodelet).
#   status  the nodes, or exit status 3 when no cluster runs.
#   down    take it down and leave nothing behind (also after a killed up).
#
# Internals: internal/cluster (README "A cluster on one machine").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

[[ $(id -u) -eq 0 ]] || { echo "cluster: run as root" >&2; exit 2; }

cmd=${1:-}
case $cmd in
up)
	scripts/setup.sh >&2
	eval "$(scripts/controlplane.sh tools kube-controller-manager kube-scheduler kube-proxy kubelet coredns | grep -E '^[A-Z_0-9]+=')"
	go build -o bin/ ./scripts/cluster
	shift
	exec bin/cluster up -k8s-bin "$(dirname "$KUBE_PROXY")" -nodelet-bin "$PWD/bin" "$@"
	;;
status | down)
	if [[ ! -x bin/cluster ]]; then
		go build -o bin/ ./scripts/cluster
	fi
	exec bin/cluster "$cmd"
	;;
*)
	sed -n '2,/^set -e/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -e/d' >&2
	exit 2
	;;
esac
