package runtime

import (
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The paths the kubelet masks or makes read-only in every unprivileged
// container (k8s.io/kubernetes/pkg/securitycontext).
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// effectiveSecurityContext merges the pod's security context into the
// container's (the container wins), as the kubelet's
// DetermineEffectiveSecurityContext.
func effectiveSecurityContext(pod *corev1.Pod, c *corev1.Container) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{}
	if c.SecurityContext != nil {
		sc = c.SecurityContext.DeepCopy()
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if sc.RunAsUser == nil {
			sc.RunAsUser = psc.RunAsUser
		}
		if sc.RunAsGroup == nil {
			sc.RunAsGroup = psc.RunAsGroup
		}
		if sc.RunAsNonRoot == nil {
			sc.RunAsNonRoot = psc.RunAsNonRoot
		}
		if sc.SeccompProfile == nil {
			sc.SeccompProfile = psc.SeccompProfile
		}
		if sc.SELinuxOptions == nil {
			sc.SELinuxOptions = psc.SELinuxOptions
		}
	}
	return sc
}

// podString is the kubelet's format.Pod: name_namespace(uid).
func podString(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// verifyRunAsNonRoot refuses a container that asks for runAsNonRoot but
// would run as root, with the kubelet's messages. img is the image's
// status (its user), nil when unknown.
func verifyRunAsNonRoot(pod *corev1.Pod, c *corev1.Container, img *runtimeapi.Image) error {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podString(pod), c.Name)
		}
		return nil
	}
	uid, username := imageUser(img)
	switch {
	case uid != nil && *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podString(pod), c.Name)
	case uid == nil && username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", username, podString(pod), c.Name)
	}
	return nil
}

// imageUser is the image's user; an image that names none runs as root.
func imageUser(img *runtimeapi.Image) (*int64, string) {
	if img != nil {
		if img.Uid != nil {
			v := img.Uid.Value
			return &v, ""
		}
		if img.Username != "" {
			return nil, img.Username
		}
	}
	root := int64(0)
	return &root, ""
}

func namespaceOptions(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

// fieldSeccompProfile is the kubelet's fieldSeccompProfile: a Localhost
// profile is a path under root (runtime.seccompProfileRoot); no profile is
// RuntimeDefault with runtime.seccompDefault, else Unconfined.
func fieldSeccompProfile(p *corev1.SeccompProfile, root string, fallbackToRuntimeDefault bool) (*runtimeapi.SecurityProfile, error) {
	if p == nil {
		if fallbackToRuntimeDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || len(*p.LocalhostProfile) == 0 {
			return nil, fmt.Errorf("localhostProfile must be set if seccompProfile type is Localhost.")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(root, *p.LocalhostProfile)}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// appArmorProfile is the kubelet's getAppArmorProfile: c's profile (field,
// legacy annotation, pod field) and the deprecated string form older
// runtimes (containerd 1.6) read; nil and "" for none.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) (*runtimeapi.SecurityProfile, string, error) {
	p := podutil.AppArmorProfile(pod, c)
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			corev1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case corev1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			corev1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case corev1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil {
			return nil, "", errors.New("missing localhost apparmor profile name")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			corev1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", p.Type)
}

// containerProfiles completes c's security context as the kubelet's
// determineEffectiveSecurityContext: seccomp (Localhost under
// runtime.seccompProfileRoot, RuntimeDefault by default with
// runtime.seccompDefault), AppArmor, and the pod's user namespace.
func (m *Daemon) containerProfiles(pod *corev1.Pod, c *corev1.Container, sc *runtimeapi.LinuxContainerSecurityContext) error {
	var err error
	if sc.Seccomp, err = fieldSeccompProfile(effectiveSecurityContext(pod, c).SeccompProfile,
		m.cfg.SeccompRoot(), m.cfg.Runtime.SeccompDefault); err != nil {
		return err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = appArmorProfile(pod, c); err != nil {
		return err
	}
	sc.NamespaceOptions.UsernsOptions, err = m.usernsOptions(pod)
	return err
}

// sandboxProfiles completes the sandbox's security context as the
// kubelet's generatePodSandboxLinuxConfig: the pause container always
// runs under RuntimeDefault seccomp (so pods may use stricter profiles),
// the pod's SELinux options, and its user namespace.
func (m *Daemon) sandboxProfiles(pod *corev1.Pod, lsc *runtimeapi.LinuxSandboxSecurityContext) error {
	lsc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	if psc := pod.Spec.SecurityContext; psc != nil && psc.SELinuxOptions != nil {
		o := psc.SELinuxOptions
		lsc.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	var err error
	lsc.NamespaceOptions.UsernsOptions, err = m.usernsOptions(pod)
	return err
}

func supplementalGroups(pod *corev1.Pod) []int64 {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return nil
	}
	groups := append([]int64(nil), psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	return groups
}

// containerSecurityContext is the kubelet's
// generateLinuxContainerSecurityContext: user and group (the image's user
// when the spec names none), privileges, capabilities, read-only root,
// no_new_privs, namespaces and masked paths (seccomp, AppArmor and the
// user namespace: containerProfiles).
func containerSecurityContext(pod *corev1.Pod, c *corev1.Container, img *runtimeapi.Image) *runtimeapi.LinuxContainerSecurityContext {
	sc := effectiveSecurityContext(pod, c)
	out := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions:   namespaceOptions(pod),
		SupplementalGroups: supplementalGroups(pod),
	}
	if sc.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	} else if uid, name := imageUser(img); img != nil && img.Uid != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *uid}
	} else if name != "" {
		out.RunAsUsername = name
	}
	if sc.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	if sc.Privileged != nil {
		out.Privileged = *sc.Privileged
	}
	if sc.ReadOnlyRootFilesystem != nil {
		out.ReadonlyRootfs = *sc.ReadOnlyRootFilesystem
	}
	if sc.AllowPrivilegeEscalation != nil {
		out.NoNewPrivs = !*sc.AllowPrivilegeEscalation
	}
	if sc.Capabilities != nil {
		caps := &runtimeapi.Capability{}
		for _, a := range sc.Capabilities.Add {
			caps.AddCapabilities = append(caps.AddCapabilities, string(a))
		}
		for _, d := range sc.Capabilities.Drop {
			caps.DropCapabilities = append(caps.DropCapabilities, string(d))
		}
		out.Capabilities = caps
	}
	if sc.SELinuxOptions != nil {
		o := sc.SELinuxOptions
		out.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	unmasked := sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount
	if !out.Privileged && !unmasked {
		out.MaskedPaths = defaultMaskedPaths
		out.ReadonlyPaths = defaultReadonlyPaths
	}
	return out
}

// anyPrivileged: a sandbox must be privileged when one of its containers is.
func anyPrivileged(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				return true
			}
		}
	}
	return false
}
