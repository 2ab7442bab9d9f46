package admission

import (
	"fmt"

	"github.com/nodelet/nodelet/internal/podfields"
	"github.com/nodelet/nodelet/schemas"
)

// FieldsHandler refuses a pod that sets a Pod API field the node does not
// implement, as the field ledger (internal/podfields, docs/pod-fields.md)
// marks it: the kubelet would accept such a pod and run it without the
// field (or, for resourceClaims, without its devices); nodelet refuses it
// with the kubelet's reason for a pod needing what the node lacks,
// PodFeatureUnsupported, naming the field. It comes after the kubelet's
// own handlers, so a field they refuse reads as theirs.
//
// A field the container runtime may or may not have (image volumes) is
// refused or not by the runtime's state as nodelet-runtime reports it
// (SetRuntime); the controller holds pods that set one until it is known.
type FieldsHandler struct {
	runtime *schemas.RuntimeState
}

// SetRuntime is the runtime's state as nodelet-runtime last reported it;
// nil when not known.
func (h *FieldsHandler) SetRuntime(rs *schemas.RuntimeState) { h.runtime = rs }

// features are the runtime's, nil when not known.
func (h *FieldsHandler) features() podfields.RuntimeFeatures {
	if h.runtime == nil {
		return nil
	}
	return podfields.RuntimeFeatures{podfields.ImageVolumes: h.runtime.ImageVolumes}
}

// Admit implements Handler.
func (h *FieldsHandler) Admit(attrs *Attributes) Result {
	r, ok := podfields.FirstRefused(attrs.Pod, h.features())
	if !ok {
		return Result{Admit: true}
	}
	msg := r.Message()
	if r.Entry.Unless != "" && h.runtime != nil {
		msg += fmt.Sprintf(": this node's container runtime, %s %s, has no %s", h.runtime.RuntimeName, h.runtime.RuntimeVersion, r.Entry.Unless)
	}
	return Result{Reason: podfields.Reason, Message: msg}
}

// waitsForRuntime: the pod sets a field only the runtime's features
// decide, and they are not known yet.
func (h *FieldsHandler) waitsForRuntime(attrs *Attributes) bool {
	if h.runtime != nil {
		return false
	}
	r, ok := podfields.FirstRefused(attrs.Pod, nil)
	return ok && r.Entry.Unless != ""
}

var _ Handler = (*FieldsHandler)(nil)
