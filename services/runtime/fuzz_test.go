package runtime

import (
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/schemas"
)

// FuzzCRIStatus takes the runtime's answers as they come over the wire,
// ContainerStatus and PodSandboxStatus in protobuf, with whatever labels,
// annotations (the hash, restart count, preStop handler and ports nodelet
// wrote, in JSON), states, times and mounts they hold: reading them never
// panics, and the observed state built from them, with the pod's spec and
// without it, is one the runtime can publish (it encodes and decodes).
// Mounts and the log path are moved under a temporary directory, so the
// termination message is never read from the host. Seeds: a running and
// an exited container of nodelet's own, and testdata/fuzz/FuzzCRIStatus.
// Longer: go test ./services/runtime -run '^$' -fuzz FuzzCRIStatus -fuzztime 10m.
func FuzzCRIStatus(f *testing.F) {
	labels := map[string]string{labelPodUID: "uid-1", labelContainerName: "app", LabelManaged: "true"}
	annotations := map[string]string{
		annotationContainerHash: "1a2b3c", annotationRestartCount: "3", annotationContainerType: schemas.ContainerKindApp,
		annotationTerminationMessagePath: "/dev/termination-log", annotationTerminationMessagePolicy: "FallbackToLogsOnError",
		annotationPreStopHandler: `{"exec":{"command":["sh","-c","sleep 1"]}}`, annotationContainerPorts: `[{"containerPort":80,"protocol":"TCP"}]`,
		annotationPodTerminationGracePeriod: "30",
	}
	sandbox := &runtimeapi.PodSandboxStatus{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 1e18,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: 1},
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: "10.88.0.2", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::2"}}},
		Labels:   labels}
	for _, st := range []*runtimeapi.ContainerStatus{
		{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: 1e18, StartedAt: 1e18 + 1,
			Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}, ImageRef: "sha256:abc", Labels: labels, Annotations: annotations},
		{Id: "c2", State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: 1e18, StartedAt: 1e18 + 1, FinishedAt: 1e18 + 2,
			ExitCode: 137, Reason: "OOMKilled", Message: "out of memory", Labels: labels, Annotations: annotations,
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: "/var/lib/nodelet/pods/uid-1/term"}}},
	} {
		cs, _ := proto.Marshal(st)
		ss, _ := proto.Marshal(sandbox)
		f.Add(cs, ss)
	}
	f.Fuzz(func(t *testing.T, cs, ss []byte) {
		var st runtimeapi.ContainerStatus
		if proto.Unmarshal(cs, &st) != nil {
			return
		}
		var sb runtimeapi.PodSandboxStatus
		_ = proto.Unmarshal(ss, &sb)
		dir := t.TempDir()
		for _, m := range st.Mounts {
			if m != nil {
				m.HostPath = filepath.Join(dir, filepath.Base(m.HostPath))
			}
		}
		st.LogPath = filepath.Join(dir, "log")
		v := newCRIView(nil)
		c := &runtimeapi.Container{Id: st.Id, PodSandboxId: sb.Id, State: st.State, Labels: st.Labels, Annotations: st.Annotations}
		ci := v.keepContainer(c, &st)
		si := v.keepSandbox(sb.Id, sb.GetMetadata().GetAttempt(), sb.Labels, sb.Annotations, &sb)
		pr := &podRuntime{UID: st.Labels[labelPodUID], Name: "web", Namespace: "ns", Sandboxes: []*sandboxInfo{si}, Containers: []*containerInfo{ci}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ci.Name, Image: "busybox:1.36"}}}}
		for _, p := range []*corev1.Pod{nil, pod} {
			o := buildObserved("containerd", p, pr, newPodState(), nil)
			b, err := schemas.Encode("runtime", o)
			if err != nil {
				t.Fatalf("observed state from CRI does not encode: %v\n%+v", err, o)
			}
			if _, _, err := schemas.Decode[schemas.PodObserved](b); err != nil {
				t.Fatalf("observed state from CRI does not decode: %v\n%s", err, b)
			}
		}
	})
}
