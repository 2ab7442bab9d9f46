package podutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestQOSClass(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	req := func(r, l corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: r, Limits: l}
	}
	pod := func(podLevel *corev1.ResourceRequirements, cs ...corev1.ResourceRequirements) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Resources: podLevel}}
		for _, r := range cs {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Resources: r})
		}
		return p
	}
	guaranteed := req(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want corev1.PodQOSClass
	}{
		{"nothing set", pod(nil, req(nil, nil)), corev1.PodQOSBestEffort},
		{"requests equal limits", pod(nil, guaranteed), corev1.PodQOSGuaranteed},
		{"request below limit", pod(nil, req(rl("cpu", "500m", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), corev1.PodQOSBurstable},
		{"one guaranteed, one best effort", pod(nil, guaranteed, req(nil, nil)), corev1.PodQOSBurstable},
		// Issue 32: pod-level resources alone decide when set; a pod with
		// only pod-level resources is not BestEffort.
		{"pod level only, guaranteed", pod(&guaranteed, req(nil, nil)), corev1.PodQOSGuaranteed},
		{"pod level only, burstable", pod(&corev1.ResourceRequirements{Requests: rl("memory", "64Mi")}, req(nil, nil)), corev1.PodQOSBurstable},
		{"pod level wins over containers", pod(&corev1.ResourceRequirements{Limits: rl("memory", "1Gi"), Requests: rl("memory", "512Mi")}, guaranteed), corev1.PodQOSBurstable},
		// Hugepages are a pod-level resource too (IsSupportedPodLevelResource):
		// pod-level hugepages alone make the pod-level cpu and memory
		// decide, which are unset. The kubelet answers the same.
		{"pod level hugepages only", pod(&corev1.ResourceRequirements{Limits: rl("hugepages-2Mi", "2Mi")}, guaranteed), corev1.PodQOSBestEffort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := QOSClass(tc.pod); got != tc.want {
				t.Fatalf("QOSClass = %s, want %s", got, tc.want)
			}
			// The API's status.qosClass wins.
			p := tc.pod.DeepCopy()
			p.Status.QOSClass = corev1.PodQOSBestEffort
			if got := QOSClass(p); got != corev1.PodQOSBestEffort {
				t.Fatalf("status.qosClass ignored: %s", got)
			}
		})
	}
}

// TestOneQoSRule: QOSClass is the node's only QoS rule; no other package
// computes the class itself (issue 32: the runtime's own copy ignored
// pod-level resources and disagreed with status).
func TestOneQoSRule(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "scripts" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, banned := range []string{`"k8s.io/kubectl/pkg/util/qos"`, "func podQOS(", "ComputePodQOS("} {
			if strings.Contains(string(b), banned) && !strings.HasSuffix(path, filepath.Join("podutil", "qos.go")) &&
				!strings.HasSuffix(path, filepath.Join("podutil", "qos_test.go")) {
				t.Errorf("%s: %s; use podutil.QOSClass", path, banned)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
