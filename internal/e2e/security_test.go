package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/podutil"
)

const sysctlsManifest = `apiVersion: v1
kind: Pod
metadata:
  name: %s
%s
spec:
  terminationGracePeriodSeconds: 0
  securityContext:
    sysctls: [%s]
  containers:
  - name: c
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
`

// securityManifest is a sleeping busybox pod with extra metadata lines
// and the given sysctls.
func securityManifest(name, meta, sysctls string) string {
	return fmt.Sprintf(sysctlsManifest, name, meta, sysctls)
}

// The security fields through a whole node configured from YAML
// (admission.allowedUnsafeSysctls, runtime.seccompDefault): an unsafe
// sysctl not allowed is refused SysctlForbidden; an allowed one and a safe
// one reach the container's kernel; a container naming no seccomp profile
// runs under the runtime's default filter; a pod asking for AppArmor is
// refused where the kernel has none (applied where it has).
func TestSecurityFields(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{
		Runtime: "  seccompDefault: true\n",
		Extra:   "admission:\n  allowedUnsafeSysctls: [kernel.msgmax]\n",
	})
	n.WriteManifest("forbidden.yaml", securityManifest("forbidden", "", `{name: kernel.sem, value: "250 32000 32 128"}`))
	n.WriteManifest("allowed.yaml", securityManifest("allowed", "",
		`{name: kernel.msgmax, value: "12345"}, {name: net.ipv4.ip_unprivileged_port_start, value: "80"}`))
	n.WriteManifest("apparmor.yaml", securityManifest("apparmor",
		"  annotations: {container.apparmor.security.beta.kubernetes.io/c: runtime/default}", `{name: kernel.shm_rmid_forced, value: "1"}`))

	p := n.WaitPod("forbidden-"+nodeName, 90*time.Second, "Failed SysctlForbidden", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "SysctlForbidden"
	})
	if p.Status.Message != `Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted` {
		t.Errorf("SysctlForbidden message %q", p.Status.Message)
	}
	if len(e2e.CRISandboxes(t, ctrd, string(p.UID))) != 0 {
		t.Errorf("a refused pod got a sandbox")
	}

	p = n.WaitPod("allowed-"+nodeName, 90*time.Second, "Running", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	id := podutil.RawContainerID(p.Status.ContainerStatuses[0].ContainerID)
	c := ctrd.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Runtime.ExecSync(ctx, e2e.ExecReq(id, []string{"sh", "-c",
		"cat /proc/sys/kernel/msgmax /proc/sys/net/ipv4/ip_unprivileged_port_start; grep '^Seccomp:' /proc/self/status"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(resp.Stdout)); strings.Join(got, " ") != "12345 80 Seccomp: 2" {
		t.Errorf("in the container: %q, want sysctls 12345 and 80 and seccomp filter mode 2", resp.Stdout)
	}

	if podutil.AppArmorHostError("/") != nil {
		p = n.WaitPod("apparmor-"+nodeName, 90*time.Second, "Failed AppArmor", func(p *corev1.Pod) bool {
			return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "AppArmor"
		})
		if p.Status.Message != "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("AppArmor message %q", p.Status.Message)
		}
	} else {
		p = n.WaitPod("apparmor-"+nodeName, 90*time.Second, "Running", func(p *corev1.Pod) bool {
			return p != nil && p.Status.Phase == corev1.PodRunning
		})
		id := podutil.RawContainerID(p.Status.ContainerStatuses[0].ContainerID)
		resp, err := c.Runtime.ExecSync(ctx, e2e.ExecReq(id, []string{"cat", "/proc/self/attr/current"}))
		if err != nil || !strings.Contains(string(resp.Stdout), "(enforce)") {
			t.Errorf("AppArmor in the container: %q %v", resp.GetStdout(), err)
		}
	}
}
