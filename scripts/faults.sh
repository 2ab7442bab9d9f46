#!/usr/bin/env bash
# faults.sh — the long fault suite: a node with 30 pods running and 20 more
# being created during each fault; SIGKILL each daemon in turn, then the
# bus, then every process at once, then wipe the bus's store and restart.
# After each fault every pod must reach Running with no container restarted,
# no status going backwards and no duplicate sandbox. Prints the time each
# fault took to converge. (scripts/test.sh runs a short version: 6 + 2.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=$PATH:/usr/local/go/bin
scripts/setup.sh >/dev/null
scripts/controlplane.sh build >/dev/null
NODELET_FAULTS_LONG=1 go test -count=1 -timeout 30m -v -run '^TestFaults$' ./internal/e2e/ 2>&1 |
	grep -E 'fault convergence|converged in|^(--- |ok|FAIL|panic)|_test.go:[0-9]+:' 
