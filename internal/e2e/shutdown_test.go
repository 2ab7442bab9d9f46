package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestGracefulNodeShutdown: nodelet-gc takes logind's delay lock on
// shutdown; when logind signals PrepareForShutdown the node goes NotReady
// ("node is shutting down"), a pod that ignores SIGTERM lives for
// shutdownGracePeriod minus shutdownGracePeriodCriticalPods after it (6 s
// of 10 s here) before it is killed, is Failed with reason Terminated, the
// kubelet's message and a DisruptionTarget condition, a new pod is refused
// with NodeShutdown, and the lock is released once the pods are down.
func TestGracefulNodeShutdown(t *testing.T) {
	addr := testenv.StartSystemBus(t)
	logind := testenv.StartLogind(t, addr, 30*time.Second)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	e2e.NewNode(t, e2e.NodeOptions{API: true, GC: "  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 4s\n"})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eventually.True(t, 60*time.Second, "a delay inhibitor lock on shutdown", func() bool {
		l := logind.Inhibitors()
		return len(l) == 1 && l[0] == "shutdown:nodelet:delay"
	})
	nodeReady := func(want corev1.ConditionStatus, msg string) func() bool {
		return func() bool {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == want && strings.Contains(c.Message, msg)
				}
			}
			return false
		}
	}
	eventually.True(t, 60*time.Second, "node Ready", nodeReady(corev1.ConditionTrue, ""))

	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	stubborn := e2e.APIPod(nodeName, ns, "stubborn", "")
	stubborn.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'echo got TERM' TERM; while true; do sleep 0.2; done"}
	stubborn.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	created, err := pods.Create(ctx, stubborn, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 90*time.Second, "the pod Running", func() bool {
		p, err := pods.Get(ctx, "stubborn", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})

	signalled := time.Now()
	logind.PrepareForShutdown(true)
	eventually.True(t, 30*time.Second, "node NotReady: node is shutting down", nodeReady(corev1.ConditionFalse, "node is shutting down"))
	if _, err := pods.Create(ctx, e2e.APIPod(nodeName, ns, "latecomer", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var released time.Time
	select {
	case released = <-logind.Released:
	case <-time.After(60 * time.Second):
		t.Fatal("the inhibitor lock was not released")
	}
	// The group's wait ends at its grace period (the kubelet's timer) and
	// the lock goes with it; the kill itself ends at about the same time.
	if waited := released.Sub(signalled); waited < 6*time.Second || waited > 9*time.Second {
		t.Fatalf("lock released %v after PrepareForShutdown, want after the 6s of the non-critical group", waited)
	}
	var st *runtimeapi.ContainerStatus
	eventually.True(t, 30*time.Second, "the pod's container killed", func() bool {
		for _, c := range e2e.CRIContainers(t, ctrd, string(created.UID)) {
			if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				resp, err := ctrd.RuntimeClient(t).Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
				if err == nil {
					st = resp.Status
				}
				return err == nil
			}
		}
		return false
	})
	lived := time.Unix(0, st.FinishedAt).Sub(signalled)
	t.Logf("pod killed %v after PrepareForShutdown (exit %d); lock released after %v", lived.Round(10*time.Millisecond),
		st.ExitCode, released.Sub(signalled).Round(10*time.Millisecond))
	if lived < 6*time.Second || lived > 8*time.Second || st.ExitCode != 137 {
		t.Fatalf("the pod lived %v after the shutdown signal (exit %d), want 6s (shutdownGracePeriod 10s - critical 4s)", lived, st.ExitCode)
	}

	eventually.True(t, 60*time.Second, "the pod Failed with reason Terminated", func() bool {
		p, err := pods.Get(ctx, "stubborn", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Terminated" ||
			p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				return c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet && c.Message == p.Status.Message
			}
		}
		return false
	})
	eventually.True(t, 60*time.Second, "the new pod refused with NodeShutdown", func() bool {
		p, err := pods.Get(ctx, "latecomer", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeShutdown" &&
			p.Status.Message == "Pod was rejected: Pod was rejected as the node is shutting down."
	})
	if evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeShutdown"}); err != nil || len(evs.Items) == 0 {
		t.Errorf("no NodeShutdown node event: %v", err)
	}

	// A cancelled shutdown: Ready again, and the lock taken again.
	logind.PrepareForShutdown(false)
	eventually.True(t, 30*time.Second, "node Ready after the cancellation", nodeReady(corev1.ConditionTrue, ""))
	eventually.True(t, 30*time.Second, "the lock taken again", func() bool { return len(logind.Inhibitors()) == 2 })
}
