package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statusOnly is a RuntimeService answering Status with the given handlers.
type statusOnly struct {
	internalapi.RuntimeService
	handlers []*runtimeapi.RuntimeHandler
}

func (s *statusOnly) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{RuntimeHandlers: s.handlers}, nil
}

func localhost(name string) *corev1.SeccompProfile {
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
}

// The kubelet's getSeccompProfile: the container's field, then the pod's;
// Localhost under runtime.seccompProfileRoot (<stateDir>/seccomp by
// default); none is Unconfined, or RuntimeDefault with seccompDefault.
func TestSeccompProfiles(t *testing.T) {
	m := testManager(t)
	pod := newPod("p", busybox("a", ""), busybox("b", ""))
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: localhost("pod.json")}
	pod.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	profile := func(i int) *runtimeapi.SecurityProfile {
		t.Helper()
		cfg, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[i], containerInputs{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Linux.SecurityContext.Seccomp
	}
	if p := profile(0); p.ProfileType != runtimeapi.SecurityProfile_Localhost || p.LocalhostRef != filepath.Join(m.cfg.Node.StateDir, "seccomp", "pod.json") {
		t.Errorf("pod's Localhost profile: %v", p)
	}
	if p := profile(1); p.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("container's RuntimeDefault: %v", p)
	}
	m.cfg.Runtime.SeccompProfileRoot = "/etc/seccomp"
	pod.Spec.SecurityContext.SeccompProfile = localhost("dir/x.json")
	if p := profile(0); p.LocalhostRef != "/etc/seccomp/dir/x.json" {
		t.Errorf("under seccompProfileRoot: %v", p)
	}
	pod.Spec.SecurityContext.SeccompProfile = nil
	if p := profile(0); p.ProfileType != runtimeapi.SecurityProfile_Unconfined {
		t.Errorf("no profile: %v", p)
	}
	m.cfg.Runtime.SeccompDefault = true
	if p := profile(0); p.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("no profile with seccompDefault: %v", p)
	}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
	if p := profile(0); p.ProfileType != runtimeapi.SecurityProfile_Unconfined {
		t.Errorf("explicit Unconfined with seccompDefault: %v", p)
	}
	pod.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}
	_, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], containerInputs{})
	if err == nil || err.Error() != "localhostProfile must be set if seccompProfile type is Localhost." {
		t.Errorf("Localhost without a name: %v", err)
	}
}

// The kubelet's getAppArmorProfile: field, legacy annotation, pod field;
// the deprecated string form too.
func TestAppArmorContainerProfile(t *testing.T) {
	m := testManager(t)
	pod := newPod("p", busybox("a", ""), busybox("b", ""), busybox("c", ""))
	name := "my-profile"
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}}
	pod.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "b": "unconfined"}
	want := []struct {
		typ         runtimeapi.SecurityProfile_ProfileType
		ref, legacy string
	}{
		{runtimeapi.SecurityProfile_Localhost, "my-profile", "localhost/my-profile"},
		{runtimeapi.SecurityProfile_Unconfined, "", "unconfined"},
		{runtimeapi.SecurityProfile_RuntimeDefault, "", "runtime/default"},
	}
	for i, w := range want {
		cfg, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[i], containerInputs{})
		if err != nil {
			t.Fatal(err)
		}
		sc := cfg.Linux.SecurityContext
		if sc.Apparmor == nil || sc.Apparmor.ProfileType != w.typ || sc.Apparmor.LocalhostRef != w.ref || sc.ApparmorProfile != w.legacy {
			t.Errorf("container %d: %v %q, want %+v", i, sc.Apparmor, sc.ApparmorProfile, w)
		}
	}
	plain := newPod("q", busybox("a", ""))
	cfg, _ := m.containerConfig(context.Background(), plain, &plain.Spec.Containers[0], containerInputs{})
	if sc := cfg.Linux.SecurityContext; sc.Apparmor != nil || sc.ApparmorProfile != "" {
		t.Errorf("no profile asked: %v %q", sc.Apparmor, sc.ApparmorProfile)
	}
}

// The kubelet's generatePodSandboxLinuxConfig: the sandbox always runs
// under RuntimeDefault seccomp and gets the pod's SELinux options;
// procMount Unmasked drops the masked and read-only paths.
func TestSandboxSecurity(t *testing.T) {
	m := testManager(t)
	pod := newPod("p", busybox("a", ""))
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: localhost("x.json"),
		SELinuxOptions: &corev1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0:c1"}}
	cfg, err := m.sandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Linux.SecurityContext
	if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("sandbox seccomp %v", sc.Seccomp)
	}
	if o := sc.SelinuxOptions; o == nil || o.User != "u" || o.Role != "r" || o.Type != "t" || o.Level != "s0:c1" {
		t.Errorf("sandbox SELinux %v", o)
	}
	if u := sc.NamespaceOptions.UsernsOptions; u == nil || u.Mode != runtimeapi.NamespaceMode_NODE {
		t.Errorf("sandbox userns %v", u)
	}
	unmasked := corev1.UnmaskedProcMount
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: &unmasked}
	c, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], containerInputs{})
	if err != nil {
		t.Fatal(err)
	}
	if csc := c.Linux.SecurityContext; len(csc.MaskedPaths) != 0 || len(csc.ReadonlyPaths) != 0 || csc.SelinuxOptions.GetType() != "t" {
		t.Errorf("procMount Unmasked: masked %v readonly %v selinux %v", csc.MaskedPaths, csc.ReadonlyPaths, csc.SelinuxOptions)
	}
}

// hostUsers: false — refused with the kubelet's message when the runtime
// declares no user namespace support, else a 65536-ID range per pod, kept
// in the pod's directory and stable across calls.
func TestUserNamespaces(t *testing.T) {
	m := testManager(t)
	no := false
	pod := newPod("p", busybox("a", ""))
	pod.Spec.HostUsers = &no

	m.rs = &statusOnly{} // containerd 1.x: no handlers in its status
	_, err := m.sandboxConfig(pod, 0)
	if err == nil || err.Error() != "can't set `spec.hostUsers: false`, runtime does not support user namespaces" {
		t.Fatalf("old runtime: %v", err)
	}
	m.rs = &statusOnly{handlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		{Name: "kata", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}}
	if _, err := m.sandboxConfig(pod, 0); err == nil || !strings.Contains(err.Error(), "runtime does not support user namespaces") {
		t.Fatalf("default handler without the feature: %v", err)
	}
	rc := "gvisor"
	pod.Spec.RuntimeClassName = &rc
	if _, err := m.sandboxConfig(pod, 0); err == nil || err.Error() != "can't set `spec.hostUsers: false`, RuntimeClass handler \"gvisor\" does not support user namespaces: the handler \"gvisor\" is not known" {
		t.Fatalf("unknown handler: %v", err)
	}
	rc = "kata"
	cfg, err := m.sandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions
	if u.Mode != runtimeapi.NamespaceMode_POD || len(u.Uids) != 1 || len(u.Gids) != 1 ||
		u.Uids[0].HostId != 65536 || u.Uids[0].ContainerId != 0 || u.Uids[0].Length != 65536 || u.Gids[0].HostId != 65536 {
		t.Fatalf("userns %v", u)
	}
	c, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], containerInputs{})
	if err != nil {
		t.Fatal(err)
	}
	if cu := c.Linux.SecurityContext.NamespaceOptions.UsernsOptions; cu.Mode != runtimeapi.NamespaceMode_POD || cu.Uids[0].HostId != 65536 {
		t.Fatalf("container userns %v", cu)
	}
	other := newPod("q", busybox("a", ""))
	other.Spec.HostUsers, other.Spec.RuntimeClassName = &no, &rc
	cfg, err = m.sandboxConfig(other, 0)
	if err != nil || cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids[0].HostId != 2*65536 {
		t.Fatalf("second pod: %v %v", cfg, err)
	}
	// The first pod's range is freed with its directory.
	if err := os.RemoveAll(podDir(m.cfg.Node.StateDir, string(pod.UID))); err != nil {
		t.Fatal(err)
	}
	third := newPod("r", busybox("a", ""))
	third.Spec.HostUsers, third.Spec.RuntimeClassName = &no, &rc
	if cfg, err = m.sandboxConfig(third, 0); err != nil || cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids[0].HostId != 65536 {
		t.Fatalf("freed range not reused: %v %v", cfg, err)
	}
	// A damaged file is an error, not a new range.
	file := filepath.Join(podDir(m.cfg.Node.StateDir, string(other.UID)), "userns")
	if err := os.WriteFile(file, []byte(`{"uidMappings":[{"hostId":5,"containerId":0,"length":65536}],"gidMappings":[{"hostId":5,"containerId":0,"length":65536}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.sandboxConfig(other, 0); err == nil || !strings.Contains(err.Error(), "invalid user namespace mappings file") {
		t.Fatalf("damaged file: %v", err)
	}
}
