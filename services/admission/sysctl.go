package admission

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// ReasonSysctlForbidden refuses a pod asking for a sysctl that is neither
// safe nor allowed by admission.allowedUnsafeSysctls (the kubelet's
// sysctl.ForbiddenReason).
const ReasonSysctlForbidden = "SysctlForbidden"

// safeSysctls is the kubelet's safe set (pkg/kubelet/sysctl/safe_sysctls.go):
// namespaced, and unable to affect other pods. Some are namespaced only from
// the kernel version given.
var safeSysctls = []struct{ name, kernel string }{
	{"kernel.shm_rmid_forced", ""},
	{"net.ipv4.ip_local_port_range", ""},
	{"net.ipv4.tcp_syncookies", ""},
	{"net.ipv4.ping_group_range", ""},
	{"net.ipv4.ip_unprivileged_port_start", ""},
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_keepalive_time", "4.5"},
	{"net.ipv4.tcp_fin_timeout", "4.6"},
	{"net.ipv4.tcp_keepalive_intvl", "4.5"},
	{"net.ipv4.tcp_keepalive_probes", "4.5"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
	{"net.ipv4.tcp_slow_start_after_idle", "4.15"},
	{"net.ipv4.tcp_notsent_lowat", "4.6"},
}

// sysctlPattern is the API's sysctl pattern (policy validation's
// SysctlContainSlashPatternFmt) with an optional trailing "*".
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\.\*|\*)?$`)

// SysctlHandler is the kubelet's sysctl allowlist admission handler
// (pkg/kubelet/sysctl patternAllowlist): the safe sysctls the kernel
// namespaces plus the configured unsafe ones (names or "prefix*").
type SysctlHandler struct {
	sysctls  map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

// NewSysctlHandler allows the safe sysctls for kernelRelease (uname -r;
// empty reads the running kernel's) and allowedUnsafe.
func NewSysctlHandler(allowedUnsafe []string, kernelRelease string) (*SysctlHandler, error) {
	if kernelRelease == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err == nil {
			kernelRelease = unix.ByteSliceToString(u.Release[:])
		}
	}
	kernel, _ := version.ParseGeneric(kernelRelease)
	patterns := append([]string{}, allowedUnsafe...)
	for _, s := range safeSysctls {
		if s.kernel == "" || (kernel != nil && kernel.AtLeast(version.MustParseGeneric(s.kernel))) {
			patterns = append(patterns, s.name)
		}
	}
	h := &SysctlHandler{sysctls: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	for _, p := range patterns {
		if len(p) > 253 || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", p, sysctlPattern)
		}
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(p)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", nameOrPrefix)
		}
		if prefixed {
			h.prefixes[nameOrPrefix] = ns
		} else {
			h.sysctls[nameOrPrefix] = ns
		}
	}
	return h, nil
}

// Admit implements Handler.
func (h *SysctlHandler) Admit(attrs *Attributes) Result {
	pod := attrs.Pod
	if pod.Spec.SecurityContext == nil || len(pod.Spec.SecurityContext.Sysctls) == 0 {
		return Result{Admit: true}
	}
	hostUsers := pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		if err := h.validate(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC, hostUsers); err != nil {
			return Result{Reason: ReasonSysctlForbidden, Message: fmt.Sprintf("forbidden sysctl: %v", err)}
		}
	}
	return Result{Admit: true}
}

// validate is patternAllowlist.validateSysctl.
func (h *SysctlHandler) validate(name string, hostNet, hostIPC, hostUsers bool) error {
	name = utilsysctl.NormalizeName(name)
	check := func(ns utilsysctl.Namespace) error {
		if (ns == utilsysctl.IPCNamespace && hostIPC) || (ns == utilsysctl.NetNamespace && hostNet) ||
			(ns == utilsysctl.UserNamespace && hostUsers) {
			return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
		}
		return nil
	}
	if ns, ok := h.sysctls[name]; ok {
		return check(ns)
	}
	for p, ns := range h.prefixes {
		if strings.HasPrefix(name, p) {
			return check(ns)
		}
	}
	return fmt.Errorf("%q not allowlisted", name)
}

var _ Handler = (*SysctlHandler)(nil)
