package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func withSysctls(names ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.SecurityContext == nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{}
		}
		for _, n := range names {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: n, Value: "1"})
		}
	}
}

// The kubelet's sysctl allowlist: the safe set (by kernel version), the
// configured unsafe ones, and namespaces shared with the host refused.
func TestSysctls(t *testing.T) {
	h, err := NewSysctlHandler([]string{"kernel.msg*", "net.core.somaxconn"}, "6.1.0")
	if err != nil {
		t.Fatal(err)
	}
	old, err := NewSysctlHandler(nil, "4.4.0")
	if err != nil {
		t.Fatal(err)
	}
	hostNet := func(p *corev1.Pod) { p.Spec.HostNetwork = true }
	runCases(t, h, []handlerCase{
		{name: "none", pod: makePod("p", 0)},
		{name: "safe", pod: makePod("p", 0, withSysctls("kernel.shm_rmid_forced", "net.ipv4.tcp_rmem"))},
		{name: "slashes are dots", pod: makePod("p", 0, withSysctls("net/ipv4/ip_local_port_range"))},
		{name: "allowed by prefix", pod: makePod("p", 0, withSysctls("kernel.msgmax"))},
		{name: "allowed by name", pod: makePod("p", 0, withSysctls("net.core.somaxconn"))},
		{name: "unsafe, not allowed", pod: makePod("p", 0, withSysctls("kernel.shm_rmid_forced", "kernel.sem")),
			reason: "SysctlForbidden", message: `forbidden sysctl: "kernel.sem" not allowlisted`},
		{name: "net sysctl with host network", pod: makePod("p", 0, withSysctls("net.core.somaxconn"), hostNet),
			reason: "SysctlForbidden", message: `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
	})
	runCases(t, old, []handlerCase{
		{name: "not namespaced on an old kernel", pod: makePod("p", 0, withSysctls("net.ipv4.tcp_rmem")), reason: "SysctlForbidden"},
	})
	for _, bad := range [][]string{{"vm.overcommit_memory"}, {"Kernel.Msgmax"}, {"kernel..x"}} {
		if _, err := NewSysctlHandler(bad, "6.1.0"); err == nil {
			t.Errorf("NewSysctlHandler(%q) accepted", bad)
		}
	}
}
