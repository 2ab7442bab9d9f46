package admission

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

func podProfile(t corev1.AppArmorProfileType) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: t}}
	}
}

func annotation(container, value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + container: value}
	}
}

// The kubelet's appArmorAdmitHandler: refused with reason AppArmor when the
// host has none; unconfined and running pods pass; an unnamed Localhost
// profile is refused even where AppArmor is enabled.
func TestAppArmor(t *testing.T) {
	off := &AppArmorHandler{HostErr: errors.New("AppArmor is not enabled on the host")}
	on := &AppArmorHandler{}
	running := func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }
	containerField := func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	}
	runCases(t, off, []handlerCase{
		{name: "none", pod: makePod("p", 0)},
		{name: "unconfined", pod: makePod("p", 0, podProfile(corev1.AppArmorProfileTypeUnconfined))},
		{name: "unconfined annotation", pod: makePod("p", 0, annotation("c", "unconfined"))},
		{name: "pod field", pod: makePod("p", 0, podProfile(corev1.AppArmorProfileTypeRuntimeDefault)),
			reason: "AppArmor", message: "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{name: "container field", pod: makePod("p", 0, containerField), reason: "AppArmor"},
		{name: "annotation", pod: makePod("p", 0, annotation("c", "localhost/my-profile")), reason: "AppArmor"},
		{name: "already running", pod: makePod("p", 0, containerField, running)},
	})
	empty := ""
	runCases(t, on, []handlerCase{
		{name: "enabled", pod: makePod("p", 0, containerField)},
		{name: "empty localhost name", pod: makePod("p", 0, func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{
				Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &empty}}
		}), reason: "AppArmor"},
	})
}

// The host check reads securityfs and the module parameter, as
// libcontainer's apparmor.IsEnabled.
func TestAppArmorHostError(t *testing.T) {
	root := t.TempDir() + "/"
	if podutil.AppArmorHostError(root) == nil {
		t.Fatal("empty root: AppArmor reported enabled")
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/kernel/security/apparmor"), 0o755); err != nil {
		t.Fatal(err)
	}
	param := filepath.Join(root, "sys/module/apparmor/parameters/enabled")
	if err := os.MkdirAll(filepath.Dir(param), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(param, []byte("N\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if podutil.AppArmorHostError(root) == nil {
		t.Fatal("parameter N: AppArmor reported enabled")
	}
	if err := os.WriteFile(param, []byte("Y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := podutil.AppArmorHostError(root); err != nil {
		t.Fatalf("parameter Y: %v", err)
	}
}
