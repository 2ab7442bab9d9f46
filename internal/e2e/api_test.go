package e2e_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestClusterNode covers what a control plane sees of a nodelet node: the
// Node registered Ready with its capacity, the Lease renewed, an API pod
// going Pending → Running and being deleted gracefully, a pod rejected by
// admission failing with the kubelet's reason, and a static pod's mirror.
func TestClusterNode(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var node *corev1.Node
	eventually.True(t, 60*time.Second, "node registered Ready", func() bool {
		var err error
		node, err = admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	if node.Status.Capacity.Cpu().IsZero() || node.Status.Capacity.Memory().IsZero() || node.Status.Allocatable.Pods().Value() != 110 {
		t.Fatalf("capacity %v allocatable %v", node.Status.Capacity, node.Status.Allocatable)
	}
	if node.Labels["kubernetes.io/hostname"] != nodeName || node.Status.NodeInfo.ContainerRuntimeVersion == "" {
		t.Fatalf("labels %v nodeInfo %+v", node.Labels, node.Status.NodeInfo)
	}
	lease, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	renew := lease.Spec.RenewTime.Time
	eventually.True(t, 30*time.Second, "lease renewed", func() bool {
		l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(renew)
	})

	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	created, err := pods.Create(ctx, e2e.APIPod(nodeName, ns, "app", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	eventually.True(t, 90*time.Second, "API pod Running and Ready", func() bool {
		p, err := pods.Get(ctx, "app", metav1.GetOptions{})
		running = p
		return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p) && p.Status.PodIP != ""
	})
	if len(running.Status.ContainerStatuses) != 1 || running.Status.ContainerStatuses[0].State.Running == nil ||
		running.Status.ContainerStatuses[0].ContainerID == "" || running.Status.QOSClass != corev1.PodQOSBestEffort ||
		running.Status.StartTime == nil || running.Status.HostIP == "" {
		t.Fatalf("status: %+v", running.Status)
	}

	// Graceful deletion: the object goes once the containers are gone.
	if err := pods.Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "API pod deleted after its containers stopped", func() bool {
		_, err := pods.Get(ctx, "app", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	for _, c := range e2e.CRIContainers(t, ctrd, string(created.UID)) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container %s still running after the pod object was deleted", c.Id)
		}
	}

	// A pod that cannot fit is Failed with admission's reason.
	if _, err := pods.Create(ctx, e2e.APIPod(nodeName, ns, "huge", "1000"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "huge pod Failed OutOfcpu in the API", func() bool {
		p, err := pods.Get(ctx, "huge", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "OutOfcpu"
	})
	n.WaitPod("huge", 30*time.Second, "Failed OutOfcpu in /pods", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "OutOfcpu"
	})

	// Static pod: a mirror pod appears with its status, is recreated when
	// deleted, and goes when the manifest goes.
	n.WriteManifest("web.yaml", e2e.WebManifest)
	mirrorName := "web-" + nodeName
	mirrors := admin.CoreV1().Pods("default")
	eventually.True(t, 90*time.Second, "mirror pod Running", func() bool {
		p, err := mirrors.Get(ctx, mirrorName, metav1.GetOptions{})
		return err == nil && p.Annotations["kubernetes.io/config.mirror"] != "" && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
	})
	first, _ := mirrors.Get(ctx, mirrorName, metav1.GetOptions{})
	if err := mirrors.Delete(ctx, mirrorName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "mirror pod recreated", func() bool {
		p, err := mirrors.Get(ctx, mirrorName, metav1.GetOptions{})
		return err == nil && p.UID != first.UID
	})
	n.RemoveManifest("web.yaml")
	eventually.True(t, 60*time.Second, "mirror pod deleted with the manifest", func() bool {
		_, err := mirrors.Get(ctx, mirrorName, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
