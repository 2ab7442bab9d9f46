// Package machine runs nodelet as an operator's node runs it: under systemd
// as PID 1 in a systemd-nspawn machine — the unit set, the systemd cgroup
// driver, kubeadm init and join through the kubelet drop-in. Its own test
// binary, apart from internal/e2e's whole nodes, so that neither outlasts
// go test's per-binary timeout and the two run side by side.
// It holds only tests and their harness.
package machine
