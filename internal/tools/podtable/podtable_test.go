package podtable

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testPod(policy corev1.RestartPolicy, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1", Generation: 1},
		Spec:       corev1.PodSpec{RestartPolicy: policy},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func TestPodRows(t *testing.T) {
	now := t0.Add(5 * time.Hour)
	base := func(mut func(p *corev1.Pod)) corev1.Pod {
		p := testPod(corev1.RestartPolicyAlways, "app", "side")
		p.CreationTimestamp = metav1.NewTime(t0)
		mut(p)
		return *p
	}
	runningReady := func(name string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	tests := []struct {
		name string
		pod  corev1.Pod
		want PodRow
	}{{
		name: "no status yet",
		pod:  base(func(p *corev1.Pod) {}),
		want: PodRow{Ready: "0/2", Status: "Pending", Restarts: "0", Age: "5h", IP: "<none>"},
	}, {
		name: "running and ready",
		pod: base(func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.88.0.5"}},
				ContainerStatuses: []corev1.ContainerStatus{runningReady("app", 0), runningReady("side", 0)}}
		}),
		want: PodRow{Ready: "2/2", Status: "Running", Restarts: "0", Age: "5h", IP: "10.88.0.5"},
	}, {
		name: "crash looping, with the last restart's age",
		pod: base(func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				runningReady("app", 0),
				{Name: "side", RestartCount: 4,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(now.Add(-90 * time.Second))}}},
			}}
		}),
		want: PodRow{Ready: "1/2", Status: "CrashLoopBackOff", Restarts: "4 (90s ago)", Age: "5h", IP: "<none>"},
	}, {
		name: "rejected by admission",
		pod: base(func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu"}
		}),
		want: PodRow{Ready: "0/2", Status: "OutOfcpu", Restarts: "0", Age: "5h", IP: "<none>"},
	}, {
		name: "completed",
		pod: base(func(p *corev1.Pod) {
			done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
			p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: done}, {Name: "side", State: done}}}
		}),
		want: PodRow{Ready: "0/2", Status: "Completed", Restarts: "0", Age: "5h", IP: "<none>"},
	}, {
		name: "initializing",
		pod: base(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i1"}, {Name: "i2"}}
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
				{Name: "i2", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			}}
		}),
		want: PodRow{Ready: "0/2", Status: "Init:1/2", Restarts: "0", Age: "5h", IP: "<none>"},
	}, {
		name: "sidecar counts in READY",
		pod: base(func(p *corev1.Pod) {
			p.Spec.Containers = p.Spec.Containers[:1]
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:            []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
				ContainerStatuses:     []corev1.ContainerStatus{runningReady("app", 0)}}
		}),
		want: PodRow{Ready: "2/2", Status: "Running", Restarts: "0", Age: "5h", IP: "<none>"},
	}, {
		name: "being deleted",
		pod: base(func(p *corev1.Pod) {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(now))
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningReady("app", 0), runningReady("side", 0)}}
		}),
		want: PodRow{Ready: "2/2", Status: "Terminating", Restarts: "0", Age: "5h", IP: "<none>"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodRows([]corev1.Pod{tc.pod}, now)[0]
			tc.want.Namespace, tc.want.Name = "default", "web"
			if got != tc.want {
				t.Errorf("row = %+v\nwant  %+v", got, tc.want)
			}
		})
	}
}

func TestWritePodTable(t *testing.T) {
	var b bytes.Buffer
	rows := []PodRow{{Namespace: "kube-system", Name: "etcd-node-1", Ready: "1/1", Status: "Running", Restarts: "0", Age: "5m", IP: "10.88.0.2"}}
	if err := WritePodTable(&b, rows, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME READY STATUS RESTARTS AGE IP" ||
		strings.Join(strings.Fields(lines[1]), " ") != "etcd-node-1 1/1 Running 0 5m 10.88.0.2" {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	_ = WritePodTable(&b, rows, true)
	if !strings.HasPrefix(b.String(), "NAMESPACE") || !strings.Contains(b.String(), "kube-system") {
		t.Errorf("table with namespaces:\n%s", b.String())
	}
}
