package status

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// syncStatic keeps the mirror pod of a static pod, as the kubelet's syncPod
// does: a mirror pod being deleted, or made from another version of the
// static pod (its config.mirror annotation is not the static pod's
// config.hash), is deleted and created again; a missing one is created;
// then its status is the static pod's.
func (a *apiSync) syncStatic(ctx context.Context, d *schemas.PodDesired, rec *schemas.PodStatusRecord, mirror *corev1.Pod) error {
	static := d.Pod
	if mirror != nil && !podutil.IsMirrorPod(mirror) {
		a.s.log.Warn("A pod that is not a mirror pod has the static pod's name; not creating the mirror pod",
			"pod", podutil.PodRef(static), "podUID", mirror.UID)
		return nil
	}
	hash := static.Annotations[podutil.AnnotationConfigHash]
	if mirror != nil && (mirror.DeletionTimestamp != nil || mirror.Annotations[podutil.AnnotationConfigMirror] != hash) {
		reason := "deleted in the API"
		if mirror.DeletionTimestamp == nil {
			reason = "static pod changed"
		}
		if err := a.deleteMirror(ctx, mirror, reason); err != nil {
			return err
		}
		mirror = nil
	}
	if mirror == nil {
		var err error
		if mirror, err = a.createMirror(ctx, static, hash); err != nil || mirror == nil {
			return err
		}
	}
	if rec == nil {
		return nil
	}
	_, err := a.patchStatus(ctx, mirror, rec.Status)
	return err
}

// createMirror creates the mirror pod: a copy of the static pod annotated
// with its hash and owned by the Node (NodeRestriction requires both).
// Without a registered Node it tries again later.
func (a *apiSync) createMirror(ctx context.Context, static *corev1.Pod, hash string) (*corev1.Pod, error) {
	nodeUID, ok := a.s.node.nodeUID()
	if !ok {
		a.queue.AddAfter(static.Namespace+"/"+static.Name, time.Second)
		return nil, nil
	}
	m := static.DeepCopy()
	m.UID = ""
	m.ResourceVersion = ""
	m.Generation = 0
	m.CreationTimestamp = metav1.Time{}
	m.ManagedFields = nil
	m.Status = corev1.PodStatus{}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[podutil.AnnotationConfigMirror] = hash
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Node", Name: a.s.nodeName, UID: nodeUID, Controller: &controller,
	}}
	created, err := a.kube.CoreV1().Pods(m.Namespace).Create(ctx, m, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The informer has not seen it yet, or its deletion is not done.
		a.queue.AddAfter(static.Namespace+"/"+static.Name, time.Second)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create mirror pod: %w", err)
	}
	a.s.log.Info("Created mirror pod", "pod", podutil.PodRef(created), "podUID", created.UID, "staticPodUID", static.UID)
	return created, nil
}

// deleteMirror deletes a mirror pod at once, only this UID.
func (a *apiSync) deleteMirror(ctx context.Context, mirror *corev1.Pod, why string) error {
	err := a.kube.CoreV1().Pods(mirror.Namespace).Delete(ctx, mirror.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      metav1.NewUIDPreconditions(string(mirror.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete mirror pod: %w", err)
	}
	a.s.log.Info("Deleted mirror pod", "pod", podutil.PodRef(mirror), "podUID", mirror.UID, "reason", why)
	a.forget(mirror.UID)
	return nil
}
