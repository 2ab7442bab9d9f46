package podutil

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AppArmorProfile is the profile container c runs under, nil for none: its
// own field, then the pod's legacy annotation for it, then the pod's field
// (k8s.io/kubernetes pkg/security/apparmor GetProfile).
func AppArmorProfile(pod *corev1.Pod, c *corev1.Container) *corev1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if p := appArmorFromAnnotations(pod.Annotations, c.Name); p != nil {
		return p
	}
	if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.AppArmorProfile != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// appArmorFromAnnotations is apparmor's getProfileFromPodAnnotations: the
// deprecated container.apparmor.security.beta.kubernetes.io/<name>
// annotation; an invalid value is no profile.
func appArmorFromAnnotations(annotations map[string]string, container string) *corev1.AppArmorProfile {
	val, ok := annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+container]
	if !ok {
		return nil
	}
	switch {
	case val == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	case val == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	case strings.HasPrefix(val, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
		name := strings.TrimPrefix(val, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
	}
	return nil
}

// AppArmorRequired tells whether the pod asks for an AppArmor profile other
// than unconfined (apparmor's isRequired, including its quirk: of the
// annotations only the first one met is looked at).
func AppArmorRequired(pod *corev1.Pod) bool {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.AppArmorProfile != nil &&
		sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		return true
	}
	inUse := false
	VisitAllContainers(pod, func(c *corev1.Container) bool {
		if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil &&
			c.SecurityContext.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			inUse = true
			return false
		}
		return true
	})
	if inUse {
		return true
	}
	for key, value := range pod.Annotations {
		if strings.HasPrefix(key, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) {
			return value != corev1.DeprecatedAppArmorBetaProfileNameUnconfined
		}
	}
	return false
}

// ValidateAppArmor is apparmor's validator.Validate: nil when the pod asks
// for no profile; hostErr (from AppArmorHostError) when it does and the
// host cannot enforce one; an error for an empty Localhost profile name.
func ValidateAppArmor(pod *corev1.Pod, hostErr error) error {
	if !AppArmorRequired(pod) {
		return nil
	}
	if hostErr != nil {
		return hostErr
	}
	var err error
	VisitAllContainers(pod, func(c *corev1.Container) bool {
		p := AppArmorProfile(pod, c)
		if p != nil && p.Type == corev1.AppArmorProfileTypeLocalhost &&
			(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			err = fmt.Errorf("invalid empty AppArmor profile name: %q", p)
			return false
		}
		return true
	})
	return err
}

// AppArmorHostError is apparmor's validateHost: nil when the kernel has
// AppArmor enabled (securityfs shows it and the module parameter says Y,
// as libcontainer's apparmor.IsEnabled reads them under root, "/" normally).
func AppArmorHostError(root string) error {
	if _, err := os.Stat(root + "sys/kernel/security/apparmor"); err == nil {
		buf, err := os.ReadFile(root + "sys/module/apparmor/parameters/enabled")
		if err == nil && len(buf) > 1 && buf[0] == 'Y' {
			return nil
		}
	}
	return errors.New("AppArmor is not enabled on the host")
}

// VisitAllContainers calls visit for the init, regular and ephemeral
// containers of pod until it returns false (podutil.VisitContainers with
// AllContainers).
func VisitAllContainers(pod *corev1.Pod, visit func(*corev1.Container) bool) bool {
	for i := range pod.Spec.InitContainers {
		if !visit(&pod.Spec.InitContainers[i]) {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if !visit(&pod.Spec.Containers[i]) {
			return false
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if !visit((*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return false
		}
	}
	return true
}
