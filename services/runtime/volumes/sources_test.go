package volumes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What an inline CSI volume hands the driver: fsType, the publish
// secret in the pod's namespace, read-only, attributes and a handle of
// the pod's UID and the volume's name (the kubelet's csi plugin).
func TestCSIInlineVolumeSource(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", UID: "uid-1"}}
	v := &corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: "inline.csi.example", ReadOnly: ptr.To(true), FSType: ptr.To("ext4"),
		VolumeAttributes:     map[string]string{"size": "1"},
		NodePublishSecretRef: &corev1.LocalObjectReference{Name: "creds"},
	}}}
	cv := csiVolumeInline(pod, v)
	if cv.driver != "inline.csi.example" || !cv.readOnly || cv.fsType != "ext4" || cv.attributes["size"] != "1" || !cv.inline ||
		cv.handle != makeVolumeHandle("uid-1", "v") {
		t.Fatalf("inline CSI volume %+v", cv)
	}
	if cv.publishSecret == nil || cv.publishSecret.Name != "creds" || cv.publishSecret.Namespace != "team" {
		t.Fatalf("publish secret %+v", cv.publishSecret)
	}
}

// A projected service account token asks TokenRequest for the
// projection's audience and expiration, bound to the pod.
func TestServiceAccountTokenRequest(t *testing.T) {
	tp := &corev1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}
	r := podTokenRequest("p", "uid-1", tp.Audience, tp.ExpirationSeconds)
	if len(r.Spec.Audiences) != 1 || r.Spec.Audiences[0] != "vault" || *r.Spec.ExpirationSeconds != 3600 ||
		r.Spec.BoundObjectRef.Kind != "Pod" || r.Spec.BoundObjectRef.UID != "uid-1" {
		t.Fatalf("token request %+v", r.Spec)
	}
	if r := podTokenRequest("p", "uid-1", "", nil); len(r.Spec.Audiences) != 0 || *r.Spec.ExpirationSeconds != defaultExpirationSeconds {
		t.Fatalf("defaults %+v", r.Spec)
	}
}
