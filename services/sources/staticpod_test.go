package sources

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

const testPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox:1.36
`

// loadOne runs a manifest through the static pod path and returns the one
// pod it gives and the events it emitted.
func loadOne(t *testing.T, manifest, originName string, isFile bool, node string) (*corev1.Pod, []schemas.Event) {
	t.Helper()
	var events []schemas.Event
	sp := &staticParser{nodeName: node, log: discardLogger(), emit: func(e schemas.Event) { events = append(events, e) }}
	o := &origin{name: originName, isFile: isFile}
	sp.load(o, []byte(manifest))
	if len(o.pods) != 1 {
		return nil, events
	}
	return o.pods[0], events
}

func TestStaticPodIdentity(t *testing.T) {
	p, ev := loadOne(t, testPod, "/etc/pods/web.yaml", true, "Node-1")
	if p == nil {
		t.Fatalf("pod rejected: %+v", ev)
	}
	if p.Name != "web-node-1" || p.Namespace != "default" || p.Spec.NodeName != "Node-1" {
		t.Errorf("identity = %s/%s on %q, want default/web-node-1 on Node-1", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if len(p.UID) != 32 || p.Annotations[podutil.AnnotationConfigHash] != string(p.UID) {
		t.Errorf("UID %q, config.hash %q: want a 128-bit hex hash in both", p.UID, p.Annotations[podutil.AnnotationConfigHash])
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %q, want Pending", p.Status.Phase)
	}
	found := false
	for _, tol := range p.Spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoExecute && tol.Key == "" {
			found = true
		}
	}
	if !found {
		t.Errorf("file pod lacks the NoExecute toleration: %+v", p.Spec.Tolerations)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("defaults not applied: restartPolicy %q", p.Spec.RestartPolicy)
	}

	uid := func(manifest, origin string, isFile bool, node string) string {
		p, ev := loadOne(t, manifest, origin, isFile, node)
		if p == nil {
			t.Fatalf("pod rejected: %+v", ev)
		}
		return string(p.UID)
	}
	base := uid(testPod, "/etc/pods/web.yaml", true, "node-1")
	tests := []struct {
		name     string
		manifest string
		origin   string
		isFile   bool
		node     string
		same     bool
	}{
		{"same content, place and node", testPod, "/etc/pods/web.yaml", true, "node-1", true},
		{"explicit default is the same content", strings.Replace(testPod, "spec:\n", "spec:\n  restartPolicy: Always\n", 1), "/etc/pods/web.yaml", true, "node-1", true},
		{"changed spec", strings.Replace(testPod, "1.36", "1.37", 1), "/etc/pods/web.yaml", true, "node-1", false},
		{"other file", testPod, "/etc/pods/web2.yaml", true, "node-1", false},
		{"other node", testPod, "/etc/pods/web.yaml", true, "node-2", false},
		{"from a URL", testPod, "/etc/pods/web.yaml", false, "node-1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := uid(tc.manifest, tc.origin, tc.isFile, tc.node)
			if (got == base) != tc.same {
				t.Errorf("UID %s vs %s: same = %v, want %v", got, base, got == base, tc.same)
			}
		})
	}
	// The kubelet leaves the node out of a URL pod's UID.
	if uid(testPod, "http://x/pods", false, "a") != uid(testPod, "http://x/pods", false, "b") {
		t.Error("URL pod UID depends on the node")
	}
	// A URL pod gets no toleration.
	if p, _ := loadOne(t, testPod, "http://x/pods", false, "a"); len(p.Spec.Tolerations) != 0 {
		t.Errorf("URL pod has tolerations %+v", p.Spec.Tolerations)
	}
	// A manifest's own UID is kept.
	withUID := strings.Replace(testPod, "name: web\n", "name: web\n  uid: my-uid-1\n", 1)
	if got := uid(withUID, "/etc/pods/web.yaml", true, "node-1"); got != "my-uid-1" {
		t.Errorf("UID = %s, want the manifest's my-uid-1", got)
	}
}

func TestAPIReferences(t *testing.T) {
	pod := func(mut func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		mut(&p.Spec)
		return p
	}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		field string // "" = allowed
	}{
		{"plain", pod(func(*corev1.PodSpec) {}), ""},
		{"hostPath and emptyDir and downwardAPI", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{
				{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}},
				{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "d", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{}}}}}},
			}
		}), ""},
		{"service account", pod(func(s *corev1.PodSpec) { s.ServiceAccountName = "default" }), "spec.serviceAccountName"},
		{"image pull secret", pod(func(s *corev1.PodSpec) { s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "reg"}} }), "spec.imagePullSecrets[0]"},
		{"env from secret", pod(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
		}), "spec.containers[0].env[0].valueFrom.secretKeyRef"},
		{"envFrom configmap", pod(func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "i", Image: "i", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{}}}}}
		}), "spec.initContainers[0].envFrom[0].configMapRef"},
		{"secret volume", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}
		}), "spec.volumes[0].secret"},
		{"configmap volume", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
		}), "spec.volumes[0].configMap"},
		{"projected token", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}}}
		}), "spec.volumes[0].projected.sources[0].serviceAccountToken"},
		{"pvc", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
		}), "spec.volumes[0].persistentVolumeClaim"},
		{"rbd secret", pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "r", VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: &corev1.LocalObjectReference{Name: "s"}}}}}
		}), "spec.volumes[0].rbd.secretRef"},
		{"resource claims", pod(func(s *corev1.PodSpec) { s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}} }), "spec.resourceClaims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := apiReferences(tc.pod)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Type != field.ErrorTypeForbidden {
				t.Fatalf("errs = %v, want one Forbidden on %s", errs, tc.field)
			}
		})
	}
}

// A rejected static pod is reported with the file, the pod and the field.
func TestStaticPodRejected(t *testing.T) {
	bad := strings.Replace(testPod, "spec:\n", "spec:\n  serviceAccountName: robot\n", 1)
	p, ev := loadOne(t, bad, "/etc/pods/web.yaml", true, "n1")
	if p != nil {
		t.Fatalf("pod with a service account accepted")
	}
	if len(ev) != 1 {
		t.Fatalf("events = %+v, want one", ev)
	}
	e := ev[0]
	if e.Reason != ReasonFailedValidation || e.Type != corev1.EventTypeWarning || e.Object.Kind != "Pod" ||
		e.Object.Name != "web-n1" || e.Object.UID == "" {
		t.Errorf("event = %+v", e)
	}
	for _, want := range []string{"/etc/pods/web.yaml", "spec.serviceAccountName", "static pods may not reference serviceaccounts"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q lacks %q", e.Message, want)
		}
	}
}
