package bench

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestShowsRunning(t *testing.T) {
	pod := func(id string, running bool) corev1.Pod {
		st := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
		if running {
			st = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "p000-bench"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + id, State: st}}}}
	}
	for _, tc := range []struct {
		name string
		l    corev1.PodList
		want bool
	}{
		{"still running", corev1.PodList{Items: []corev1.Pod{pod("abc", true)}}, true},
		{"terminated", corev1.PodList{Items: []corev1.Pod{pod("abc", false)}}, false},
		{"restarted as another container", corev1.PodList{Items: []corev1.Pod{pod("def", true)}}, false},
		{"pod gone", corev1.PodList{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := showsRunning(&tc.l, "bench/p000-bench", "abc"); got != tc.want {
				t.Fatalf("showsRunning = %v, want %v", got, tc.want)
			}
		})
	}
}
