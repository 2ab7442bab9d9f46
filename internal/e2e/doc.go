// Package e2e runs whole nodes — `nodelet up` with every daemon, a private
// containerd and, for cluster nodes, a real kube-apiserver — and checks what
// an operator would: pods from files and from the API run, report status,
// are probed, restarted and cleaned up, and survive daemons being killed.
// It holds tests, their harness and, in this package proper, what the
// test packages here (e2e's own and machine's, the nodes under systemd)
// share: Setup for their TestMain and the checks both make.
package e2e
