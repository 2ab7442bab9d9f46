// Package podutil holds the small pod rules that several daemons apply the
// same way — $(VAR) expansion, whether a container restarts after an exit —
// so that the runtime, the prober and status can never disagree on them.
// They are the kubelet's rules; k8s.io/kubernetes itself is not imported.
package podutil
