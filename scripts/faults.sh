#!/usr/bin/env bash
# faults.sh — the long fault suite: a node with 30 pods running and 20 more
# being created during each fault; SIGKILL each daemon in turn, then the
# bus, then every process at once, then wipe the bus's store and restart.
# After each fault every pod must reach Running with no container restarted,
# no status going backwards and no duplicate sandbox. Prints the time each
# fault took to converge. Then kube-apiserver goes away for NODELET_OUTAGE
# (default 5m) under a node with API pods and a static pod started meanwhile
# (TestAPIServerOutage); the node's pod watch expires (410 Gone) mid-churn
# (TestWatchExpired); the bus's store fills its filesystem and space
# returns (TestStateDirFull); the image filesystem fills up: image GC,
# DiskPressure, eviction, recovery (TestImageFilesystemFull). (scripts/test.sh
# runs short versions: 6 + 2 pods, a 45 s outage; the last three are the same
# in both.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin
scripts/setup.sh >/dev/null
scripts/controlplane.sh build >/dev/null
NODELET_FAULTS_LONG=1 NODELET_OUTAGE=${NODELET_OUTAGE:-5m} go test -count=1 -timeout 40m -v \
	-run '^(TestFaults|TestAPIServerOutage|TestWatchExpired|TestStateDirFull|TestImageFilesystemFull)$' ./internal/e2e/faults/ 2>&1 |
	grep -E 'fault convergence|converged in|kube-apiserver|^(--- |ok|FAIL|panic)|_test.go:[0-9]+:' 
