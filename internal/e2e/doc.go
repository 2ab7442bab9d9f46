// Package e2e runs whole nodes — `nodelet up` with every daemon, a private
// containerd and, for cluster nodes, a real kube-apiserver — and checks what
// an operator would: pods from files and from the API run, report status,
// are probed, restarted and cleaned up, and survive daemons being killed.
// It holds only tests and their harness.
package e2e
