package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
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
	n := e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	p := e2e.APIPod(nodeName, ns, "resize", "100m")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	eventually.True(t, 90*time.Second, "pod Running", func() bool {
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
	eventually.True(t, 60*time.Second, "status shows the new CPU limit, no resize condition", func() bool {
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

// The e2e suite's "6 containers - various operations performed" resize
// [Conformance] spec through the API: requests raised, lowered, added and
// limits added at once. Its check, from the first status that has
// observedGeneration caught up, is ready and carries no resize condition
// (WaitForPodResizeActuation), is that this status already shows the new
// resources and allocation: no status the API ever holds may say
// "observed, done" with the old ones (nodelet-status reported the new
// generation before nodelet-runtime had admitted the resize).
func TestResizeVariousOperationsThroughAPI(t *testing.T) {
	e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	rl := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	before := []corev1.ResourceRequirements{
		{Requests: rl("cpu", "20m")},
		{Requests: rl("memory", "35Mi")},
		{Requests: rl("cpu", "20m", "memory", "35Mi")},
		{Requests: rl("cpu", "20m")},
		{Requests: rl("memory", "35Mi")},
	}
	after := []corev1.ResourceRequirements{
		{Requests: rl("cpu", "25m"), Limits: rl("cpu", "35m")},
		{Requests: rl("memory", "30Mi"), Limits: rl("memory", "50Mi")},
		{Requests: rl("cpu", "20m", "memory", "30Mi")},
		{Requests: rl("cpu", "15m", "memory", "35Mi")},
		{Requests: rl("cpu", "20m", "memory", "40Mi")},
	}
	p := e2e.APIPod(nodeName, ns, "resize-ops", "")
	app := p.Spec.Containers[0]
	p.Spec.Containers = nil
	for i, r := range before {
		c := *app.DeepCopy()
		c.Name = fmt.Sprintf("c%d", i+1)
		c.Resources = *r.DeepCopy()
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	eventually.True(t, 2*time.Minute, "pod Running and ready", func() bool {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		running = got
		return err == nil && got.Status.Phase == corev1.PodRunning && e2e.PodReady(got)
	})

	// Every version of the pod from here on, as a client watching it sees.
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name, ResourceVersion: running.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var seen []*corev1.Pod
	go func() {
		for ev := range w.ResultChan() {
			if got, ok := ev.Object.(*corev1.Pod); ok {
				mu.Lock()
				seen = append(seen, got)
				mu.Unlock()
			}
		}
	}()

	for i := range running.Spec.Containers {
		running.Spec.Containers[i].Resources = *after[i].DeepCopy()
	}
	resized, err := pods.UpdateResize(ctx, p.Name, running, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// actuated is the e2e's WaitForPodResizeActuation condition.
	actuated := func(got *corev1.Pod) bool {
		if got.Status.ObservedGeneration < resized.Generation || !e2e.PodReady(got) {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		return true
	}
	// mismatch is what ExpectPodResized then finds wrong with the status.
	mismatch := func(got *corev1.Pod) string {
		var out []string
		for i, want := range after {
			if i >= len(got.Status.ContainerStatuses) {
				return "missing container statuses"
			}
			cs := got.Status.ContainerStatuses[i]
			if cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, want) {
				out = append(out, fmt.Sprintf("%s resources %v, want %v", cs.Name, cs.Resources, want))
			}
			if !equality.Semantic.DeepEqual(cs.AllocatedResources, want.Requests) {
				out = append(out, fmt.Sprintf("%s allocatedResources %v, want %v", cs.Name, cs.AllocatedResources, want.Requests))
			}
			if cs.RestartCount != 0 {
				out = append(out, fmt.Sprintf("%s restarted", cs.Name))
			}
		}
		return strings.Join(out, "; ")
	}
	eventually.True(t, 2*time.Minute, "the resize actuated", func() bool {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && actuated(got) && mismatch(got) == ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, got := range seen {
		if actuated(got) {
			if m := mismatch(got); m != "" {
				t.Fatalf("status at resourceVersion %s says the resize of generation %d is done, with: %s",
					got.ResourceVersion, resized.Generation, m)
			}
		}
	}
}
