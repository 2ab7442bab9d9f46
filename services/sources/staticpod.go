package sources

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/internal/podutil"
)

// staticPod gives a pod from a file or URL the kubelet's identity, as
// applyDefaults in k8s.io/kubernetes pkg/kubelet/config/common.go does:
//
//   - UID: when the manifest sets none, a 128-bit FNV-1a hash of the pod
//     (API defaults applied, name not yet suffixed), then "host:<node>" and
//     "file:<path>" for a file or "url:<url>" for a URL. The same content at
//     the same place on the same node has the same UID across restarts; any
//     change of the content gives a new one, so the runtime replaces the pod.
//     The kubelet hashes a spew dump of its internal type; we hash the JSON
//     of the v1 pod, which leaves out empty fields and so does not change
//     when a newer k8s.io/api adds fields.
//   - name <name>-<lowercased node name>, namespace "default" when empty,
//     spec.nodeName this node;
//   - annotation kubernetes.io/config.hash = the UID;
//   - for files, a toleration of every NoExecute taint, so node problems
//     never evict a static pod;
//   - status.phase Pending.
func staticPod(pod *corev1.Pod, origin string, isFile bool, nodeName string) {
	// A pod in a PodList has no apiVersion and kind of its own; a pod
	// alone has them. Neither is content.
	pod.TypeMeta = metav1.TypeMeta{}
	if pod.UID == "" {
		h := fnv.New128a()
		b, err := json.Marshal(pod)
		if err != nil {
			// A decoded pod always marshals; fall back to its Go form.
			b = fmt.Appendf(nil, "%#v", pod)
		}
		h.Write(b)
		if isFile {
			fmt.Fprintf(h, "host:%s", nodeName)
			fmt.Fprintf(h, "file:%s", origin)
		} else {
			fmt.Fprintf(h, "url:%s", origin)
		}
		pod.UID = types.UID(hex.EncodeToString(h.Sum(nil)))
	}
	pod.Name = fmt.Sprintf("%s-%s", pod.Name, strings.ToLower(nodeName))
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podutil.AnnotationConfigHash] = string(pod.UID)
	if isFile {
		addToleration(pod, corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	}
	pod.Status.Phase = corev1.PodPending
}

// addToleration adds t unless the pod already has an equal one.
func addToleration(pod *corev1.Pod, t corev1.Toleration) {
	for _, have := range pod.Spec.Tolerations {
		if have.MatchToleration(&t) {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
}

// apiReferences lists, as field errors, everything in a static pod that
// needs the Kubernetes API: a static pod runs without one (or before one is
// reachable) and its mirror pod must not grant it access to API objects.
// The kubelet's rule is podutil.HasAPIObjectReference.
func apiReferences(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	forbid := func(p *field.Path, what string) {
		errs = append(errs, field.Forbidden(p, "static pods may not reference "+what))
	}
	if pod.Spec.ServiceAccountName != "" {
		forbid(spec.Child("serviceAccountName"), "serviceaccounts")
	}
	for i, s := range pod.Spec.ImagePullSecrets {
		if s.Name != "" {
			forbid(spec.Child("imagePullSecrets").Index(i), "secrets")
		}
	}
	containers := func(kind string, cs []corev1.Container) {
		for i := range cs {
			p := spec.Child(kind).Index(i)
			for j, ef := range cs[i].EnvFrom {
				if ef.SecretRef != nil {
					forbid(p.Child("envFrom").Index(j).Child("secretRef"), "secrets")
				}
				if ef.ConfigMapRef != nil {
					forbid(p.Child("envFrom").Index(j).Child("configMapRef"), "configmaps")
				}
			}
			for j, e := range cs[i].Env {
				if e.ValueFrom == nil {
					continue
				}
				if e.ValueFrom.SecretKeyRef != nil {
					forbid(p.Child("env").Index(j).Child("valueFrom", "secretKeyRef"), "secrets")
				}
				if e.ValueFrom.ConfigMapKeyRef != nil {
					forbid(p.Child("env").Index(j).Child("valueFrom", "configMapKeyRef"), "configmaps")
				}
			}
		}
	}
	containers("initContainers", pod.Spec.InitContainers)
	containers("containers", pod.Spec.Containers)
	ephemeral := make([]corev1.Container, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		ephemeral[i] = corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	containers("ephemeralContainers", ephemeral)
	if len(pod.Spec.ResourceClaims) > 0 {
		forbid(spec.Child("resourceClaims"), "resourceclaims")
	}
	for i, v := range pod.Spec.Volumes {
		p := spec.Child("volumes").Index(i)
		errs = append(errs, volumeReferences(p, &v.VolumeSource)...)
	}
	return errs
}

func volumeReferences(p *field.Path, v *corev1.VolumeSource) field.ErrorList {
	var errs field.ErrorList
	forbid := func(at *field.Path, what string) {
		errs = append(errs, field.Forbidden(at, "static pods may not reference "+what))
	}
	secretRef := func(child string, ref *corev1.LocalObjectReference) {
		if ref != nil && ref.Name != "" {
			forbid(p.Child(child, "secretRef"), "secrets")
		}
	}
	switch {
	case v.ConfigMap != nil:
		forbid(p.Child("configMap"), "configmaps")
	case v.Secret != nil:
		forbid(p.Child("secret"), "secrets")
	case v.CSI != nil:
		forbid(p.Child("csi"), "csidrivers")
	case v.Glusterfs != nil:
		forbid(p.Child("glusterfs"), "endpoints")
	case v.PersistentVolumeClaim != nil:
		forbid(p.Child("persistentVolumeClaim"), "persistentvolumeclaims")
	case v.Ephemeral != nil:
		forbid(p.Child("ephemeral"), "persistentvolumeclaims")
	case v.AzureFile != nil:
		forbid(p.Child("azureFile"), "secrets")
	case v.CephFS != nil:
		secretRef("cephfs", v.CephFS.SecretRef)
	case v.Cinder != nil:
		secretRef("cinder", v.Cinder.SecretRef)
	case v.FlexVolume != nil:
		secretRef("flexVolume", v.FlexVolume.SecretRef)
	case v.RBD != nil:
		secretRef("rbd", v.RBD.SecretRef)
	case v.ISCSI != nil:
		secretRef("iscsi", v.ISCSI.SecretRef)
	case v.ScaleIO != nil:
		secretRef("scaleIO", v.ScaleIO.SecretRef)
	case v.StorageOS != nil:
		if v.StorageOS.SecretRef != nil && v.StorageOS.SecretRef.Name != "" {
			forbid(p.Child("storageos"), "secrets")
		}
	case v.Projected != nil:
		for j, s := range v.Projected.Sources {
			sp := p.Child("projected", "sources").Index(j)
			switch {
			case s.ConfigMap != nil:
				forbid(sp.Child("configMap"), "configmaps")
			case s.Secret != nil:
				forbid(sp.Child("secret"), "secrets")
			case s.ServiceAccountToken != nil:
				forbid(sp.Child("serviceAccountToken"), "serviceaccounts")
			case s.ClusterTrustBundle != nil:
				forbid(sp.Child("clusterTrustBundle"), "clustertrustbundles")
			case s.PodCertificate != nil:
				forbid(sp.Child("podCertificate"), "podcertificates")
			case s.DownwardAPI != nil:
			default:
				errs = append(errs, field.Invalid(sp, "", "unknown projected volume source"))
			}
		}
	}
	return errs
}
