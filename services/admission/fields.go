package admission

import (
	"github.com/nodelet/nodelet/internal/podfields"
)

// FieldsHandler refuses a pod that sets a Pod API field the node does not
// implement, as the field ledger (internal/podfields, docs/pod-fields.md)
// marks it: the kubelet would accept such a pod and run it without the
// field (or, for resourceClaims, without its devices); nodelet refuses it
// with the kubelet's reason for a pod needing what the node lacks,
// PodFeatureUnsupported, naming the field. It comes after the kubelet's
// own handlers, so a field they refuse reads as theirs.
type FieldsHandler struct{}

// Admit implements Handler.
func (FieldsHandler) Admit(attrs *Attributes) Result {
	if r, ok := podfields.FirstRefused(attrs.Pod); ok {
		return Result{Reason: podfields.Reason, Message: r.Message()}
	}
	return Result{Admit: true}
}

var _ Handler = FieldsHandler{}
