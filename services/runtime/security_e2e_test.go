package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// denyMkdir is a Localhost seccomp profile (containerd's format, as
// Docker's) refusing mkdir and mkdirat with EPERM and allowing the rest.
const denyMkdir = `{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`

// shIn runs script (stderr into stdout) in the observed container name.
func (h *harness) shIn(o *schemas.PodObserved, name, script string) string {
	h.t.Helper()
	out, _ := h.execIn(o, name, true, "sh", "-c", "{ "+script+"; } 2>&1")
	return strings.TrimSpace(out)
}

// seccompMode is the Seccomp: line of /proc/self/status in container name
// (0 none, 2 filter).
func (h *harness) seccompMode(o *schemas.PodObserved, name string) string {
	h.t.Helper()
	return h.shIn(o, name, "grep '^Seccomp:' /proc/self/status | tr -d ' \t'")
}

// Seccomp on real containerd: a Localhost profile named relative to
// runtime.seccompProfileRoot is applied (mkdir fails with EPERM inside,
// works in the pod's other containers), and with runtime.seccompDefault a
// container naming no profile runs under the runtime's default filter
// while one asking for Unconfined runs unfiltered.
func TestSeccompProfilesApplied(t *testing.T) {
	root := t.TempDir()
	h := newHarness(t, harnessOptions{configure: func(c *config.Config) {
		c.Runtime.SeccompProfileRoot = root
		c.Runtime.SeccompDefault = true
	}})
	if err := os.MkdirAll(filepath.Join(root, "test"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "test", "deny-mkdir.json"), []byte(denyMkdir), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "test/deny-mkdir.json"
	locked := busybox("locked", "exec sleep 3600")
	locked.SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
		Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}}
	dflt := busybox("default", "exec sleep 3600")
	open := busybox("open", "exec sleep 3600")
	open.SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
	grace := int64(0)
	pod := newPod("seccomp", locked, dflt, open)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool {
		return running(o, "locked", "default", "open")
	})
	mkdir := "mkdir /tmp/d && echo made || echo refused"
	if got := h.shIn(o, "locked", mkdir); !strings.Contains(got, "Operation not permitted") || !strings.HasSuffix(got, "refused") {
		t.Errorf("mkdir under the Localhost profile: %q, want EPERM", got)
	}
	if got := h.shIn(o, "open", mkdir); got != "made" {
		t.Errorf("mkdir unconfined: %q", got)
	}
	if got := h.shIn(o, "default", mkdir); got != "made" {
		t.Errorf("mkdir under RuntimeDefault: %q", got)
	}
	for c, want := range map[string]string{"locked": "Seccomp:2", "default": "Seccomp:2", "open": "Seccomp:0"} {
		if got := h.seccompMode(o, c); got != want {
			t.Errorf("%s: %q, want %q", c, got, want)
		}
	}
	// What containerd was asked for, from its verbose status.
	for _, c := range h.containers(pod.UID) {
		resp, err := h.cri.Runtime.ContainerStatus(h.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		info := resp.Info["info"]
		if c.Metadata.Name == "locked" && !strings.Contains(info, filepath.Join(root, name)) {
			t.Errorf("locked: CRI config does not name the profile's path:\n%.2000s", info)
		}
	}
	// Without seccompDefault, no profile is Unconfined.
	h.stop()
	h.remove(pod)
	h.cfg.Runtime.SeccompDefault = false
	h.start(nil)
	plain := newPod("plain", busybox("c", "exec sleep 3600"))
	plain.Spec.TerminationGracePeriodSeconds = &grace
	h.run(plain)
	o = h.waitObserved(plain, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "c") })
	if got := h.seccompMode(o, "c"); got != "Seccomp:0" {
		t.Errorf("no profile, seccompDefault false: %q, want Seccomp:0", got)
	}
}

// hostUsers: false on real containerd: where the runtime declares user
// namespaces the pod runs in one (uid_map is not the identity); where it
// does not (containerd 1.6 here) no sandbox is ever made and the pod gets
// FailedCreatePodSandBox with the kubelet's message.
func TestHostUsersFalse(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	st, err := h.cri.Runtime.Status(h.ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	supported, _ := handlerSupportsUserns(st.RuntimeHandlers, "")
	no, grace := false, int64(0)
	pod := newPod("userns", busybox("c", "exec sleep 3600"))
	pod.Spec.HostUsers = &no
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	if supported {
		o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "c") })
		got := strings.Fields(h.shIn(o, "c", "cat /proc/self/uid_map"))
		if len(got) != 3 || got[0] != "0" || got[1] == "0" || got[2] != "65536" {
			t.Fatalf("uid_map %q: not a user namespace of its own", got)
		}
		return
	}
	t.Logf("runtime handlers %v: no user namespace support, expecting refusal", st.RuntimeHandlers)
	want := "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	waitFor(t, time.Minute, "FailedCreatePodSandBox", func() (bool, string) {
		for _, e := range h.events.find(pod.UID, "FailedCreatePodSandBox") {
			if e.Message == want && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, strings.Join(h.events.reasons(pod.UID), ",")
	})
	o := h.waitObserved(pod, 30*time.Second, "pod reason", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedCreatePodSandBox" && o.Message == want
	})
	if o.Sandbox != nil || len(h.sandboxes(pod.UID)) != 0 || len(h.containers(pod.UID)) != 0 {
		t.Fatalf("a sandbox or container was made for a refused pod: %s", describe(o))
	}
	// A pod on the host's user namespace still runs next to it.
	ok := newPod("hostusers", busybox("c", "exec sleep 3600"))
	ok.Spec.TerminationGracePeriodSeconds = &grace
	h.run(ok)
	o = h.waitObserved(ok, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "c") })
	if got := strings.Fields(h.shIn(o, "c", "cat /proc/self/uid_map")); len(got) != 3 || got[0] != "0" || got[1] != "0" {
		t.Fatalf("host user namespace uid_map %q", got)
	}
}
