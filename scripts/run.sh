#!/usr/bin/env bash
# run.sh — run a nodelet node on this machine, in the foreground.
#
# Runs scripts/setup.sh, installs the example static pods of deploy/examples
# into the static pod directory, then `bin/nodelet up --config
# deploy/nodelet.yaml`: a private containerd, the bus and the six daemons.
# Ctrl-C stops the agent (pods keep running in containerd; run.sh again
# adopts them). Extra arguments go to `nodelet up` (e.g. --node.name=x).
#
# In another shell:
#   bin/nodelet tap --config deploy/nodelet.yaml          every message on the bus
#   bin/nodelet pods --config deploy/nodelet.yaml         the node's pods
#   curl -s 127.0.0.1:10255/pods                          kubelet-style read-only API
#   ctr --address /run/nodelet/containerd/containerd.sock -n k8s.io tasks ls
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin

scripts/setup.sh
manifests=$(bin/nodelet config get sources.staticPodPath --config deploy/nodelet.yaml 2>/dev/null || echo /etc/nodelet/manifests)
mkdir -p "$manifests"
for f in deploy/examples/*.yaml; do
	if ! cmp -s "$f" "$manifests/$(basename "$f")"; then
		cp "$f" "$manifests/"
		echo "run: installed example pod $f into $manifests"
	fi
done
exec bin/nodelet up --config deploy/nodelet.yaml "$@"
