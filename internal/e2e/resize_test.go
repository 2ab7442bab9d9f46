package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An in-place resize through the API (the pods/resize subresource, as
// kubectl patch --subresource resize): the running container's CPU limit
// and its cgroup change, the container is not restarted, and the pod's
// status shows the new resources and allocation with no resize condition
// left; the pod cgroup sits under the node's burstable cgroup.
func TestResizeThroughAPI(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		t.Skip("reads cgroup v1 files")
	}
	n := newNode(t, nodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	p := apiPod(ns, "resize", "100m")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	waitTrue(t, 90*time.Second, "pod Running", func() bool {
		got, err := pods.Get(ctx, "resize", metav1.GetOptions{})
		running = got
		return err == nil && got.Status.Phase == corev1.PodRunning && len(got.Status.ContainerStatuses) == 1 &&
			got.Status.ContainerStatuses[0].State.Running != nil
	})
	cs := running.Status.ContainerStatuses[0]
	cid := strings.TrimPrefix(cs.ContainerID, "containerd://")
	quota := filepath.Join("/sys/fs/cgroup/cpu", n.CgroupRoot, "burstable", "pod"+string(running.UID), cid, "cpu.cfs_quota_us")
	read := func() string {
		b, err := os.ReadFile(quota)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if q := read(); q != "20000" {
		t.Fatalf("quota before: %s", q)
	}

	running.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("400m")
	if _, err := pods.UpdateResize(ctx, "resize", running, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var resized *corev1.Pod
	waitTrue(t, 60*time.Second, "status shows the new CPU limit, no resize condition", func() bool {
		got, err := pods.Get(ctx, "resize", metav1.GetOptions{})
		if err != nil || len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].Resources == nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		resized = got
		return got.Status.ContainerStatuses[0].Resources.Limits.Cpu().String() == "400m"
	})
	if q := read(); q != "40000" {
		t.Fatalf("quota after: %s", q)
	}
	after := resized.Status.ContainerStatuses[0]
	if after.ContainerID != cs.ContainerID || after.RestartCount != 0 || after.State.Running == nil {
		t.Fatalf("container restarted by the resize: %+v", after)
	}
	if after.AllocatedResources.Cpu().String() != "100m" {
		t.Fatalf("allocatedResources: %v", after.AllocatedResources)
	}
}
