package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// ReasonAppArmor refuses a pod asking for an AppArmor profile the node
// cannot enforce (the kubelet's lifecycle.AppArmorNotAdmittedReason).
const ReasonAppArmor = "AppArmor"

// AppArmorHandler is the kubelet's appArmorAdmitHandler: a pod asking for a
// profile other than unconfined (field or legacy annotation) is refused
// when the kernel has no AppArmor, or when a Localhost profile is unnamed.
type AppArmorHandler struct {
	// HostErr is why the host cannot enforce AppArmor, nil when it can
	// (podutil.AppArmorHostError).
	HostErr error
}

// NewAppArmorHandler checks the running kernel once, as the kubelet's
// apparmor.NewValidator.
func NewAppArmorHandler() *AppArmorHandler {
	return &AppArmorHandler{HostErr: podutil.AppArmorHostError("/")}
}

// Admit implements Handler. The kubelet skips pods past Pending (already
// running or terminated); a pod from a file has no phase yet and is
// checked like a pending one.
func (h *AppArmorHandler) Admit(attrs *Attributes) Result {
	if p := attrs.Pod.Status.Phase; p != corev1.PodPending && p != "" {
		return Result{Admit: true}
	}
	if err := podutil.ValidateAppArmor(attrs.Pod, h.HostErr); err != nil {
		return Result{Reason: ReasonAppArmor, Message: fmt.Sprintf("Cannot enforce AppArmor: %v", err)}
	}
	return Result{Admit: true}
}

var _ Handler = (*AppArmorHandler)(nil)
