package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// outageFor is how long kube-apiserver stays away in TestAPIServerOutage:
// 45 s, or NODELET_OUTAGE (scripts/faults.sh: 5m, issue 37's figure).
func outageFor(t *testing.T) time.Duration {
	if v := os.Getenv("NODELET_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NODELET_OUTAGE=%q: %v", v, err)
		}
		return d
	}
	return 45 * time.Second
}

// TestAPIServerOutage (issue 37, faults around the control plane): with
// kube-apiserver stopped (connections refused), or etcd stopped under it
// (errors and timeouts), the node's pods keep running with no container
// restarted, a pod that ends meanwhile and a static pod started meanwhile
// are run as ever; once it is back, their statuses and the static pod's
// events reach the API, the mirror pod is made once, and the Lease and the
// Node's Ready heartbeat resume.
func TestAPIServerOutage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stop  func()
		start func() error
	}{
		{"kube-apiserver stopped", cp.StopAPIServer, cp.StartAPIServer},
		{"etcd stopped", cp.StopEtcd, cp.StartEtcd},
		// The node cut off: packets to kube-apiserver dropped, so
		// connections hang (watches included) rather than fail.
		{"packets to kube-apiserver dropped", func() { apiserverDrop(t, "-I") }, func() error { apiserverDrop(t, "-D"); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) { outage(t, tc.name, tc.stop, tc.start) })
	}
}

// outageSeq makes each outage's pod names its own: the node of the next
// one (the same node name) sees the API pods an earlier one left, and the
// node's /pods is searched by name.
var outageSeq int

// apiserverDrop inserts (-I) or deletes (-D) the iptables rule that drops
// every packet to kube-apiserver's port on loopback.
func apiserverDrop(t *testing.T, op string) {
	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-w", op, "OUTPUT", "-p", "tcp", "-d", u.Hostname(), "--dport", u.Port(),
		"-m", "comment", "--comment", "nodelet-e2e-outage", "-j", "DROP"}
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil && op == "-I" {
		t.Fatalf("iptables %v: %v\n%s", args, err, out)
	}
}

func outage(t *testing.T, what string, stop func(), start func() error) {
	n := e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	outageSeq++
	prefix := fmt.Sprintf("o%d-", outageSeq)
	steady := []string{prefix + "steady-0", prefix + "steady-1", prefix + "steady-2"}
	endsName := prefix + "ends"
	// Gone from the API when the test ends, before the node stops: no
	// later node of this name runs them.
	t.Cleanup(func() {
		_ = pods.DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	})
	for _, name := range steady {
		if _, err := pods.Create(ctx, e2e.APIPod(nodeName, ns, name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ends := e2e.APIPod(nodeName, ns, endsName, "")
	ends.Spec.RestartPolicy = corev1.RestartPolicyNever
	ends.Spec.Containers[0].Command = []string{"sh", "-c", "sleep 15; exit 0"}
	if _, err := pods.Create(ctx, ends, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	eventually.True(t, 2*time.Minute, "every pod Running in the API", func() bool {
		for _, name := range append(steady, endsName) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			ids[name] = p.Status.ContainerStatuses[0].ContainerID
		}
		return true
	})

	stopped := time.Now()
	stop()
	t.Cleanup(func() {
		if err := start(); err != nil {
			t.Errorf("%s: starting again: %v", what, err)
		}
	})
	t.Logf("%s for %s", what, outageFor(t))
	// Meanwhile the node runs on: a static pod starts, the "ends" pod ends,
	// every other container keeps running.
	n.WriteManifest("web.yaml", e2e.WebManifest)
	n.WaitPod("web-"+nodeName, 90*time.Second, "the static pod Running without the API", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	n.WaitPod(endsName, 60*time.Second, "the ending pod Succeeded on the node", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodSucceeded
	})
	if left := outageFor(t) - time.Since(stopped); left > 0 {
		time.Sleep(left) // the outage itself: what is asserted comes after it
	}
	for _, name := range steady {
		n.WaitPod(name, 10*time.Second, "still running, not restarted, during the outage", func(p *corev1.Pod) bool {
			return p != nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].RestartCount == 0 && p.Status.ContainerStatuses[0].ContainerID == ids[name]
		})
	}

	if err := start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("%s: back after %s", what, back.Sub(stopped).Round(time.Second))
	eventually.True(t, 2*time.Minute, "the ended pod Succeeded in the API", func() bool {
		p, err := pods.Get(ctx, endsName, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded
	})
	for _, name := range steady {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 ||
			p.Status.ContainerStatuses[0].ContainerID != ids[name] {
			t.Fatalf("%s after the outage: %v %+v", name, err, p.Status)
		}
	}
	mirrorName := "web-" + nodeName
	eventually.True(t, 2*time.Minute, "one mirror pod, Running", func() bool {
		l, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		var found []corev1.Pod
		for _, p := range l.Items {
			if strings.HasPrefix(p.Name, "web-") && p.Annotations["kubernetes.io/config.mirror"] != "" {
				found = append(found, p)
			}
		}
		if len(found) > 1 {
			t.Fatalf("%d mirror pods of the static pod", len(found))
		}
		return len(found) == 1 && found[0].Name == mirrorName && found[0].Status.Phase == corev1.PodRunning
	})
	// Events the node made while the API was away reach it.
	eventually.True(t, 2*time.Minute, "the static pod's Started event, made during the outage, in the API", func() bool {
		evs, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + mirrorName})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "Started" && e.Source.Host == nodeName {
				return true
			}
		}
		return false
	})
	eventually.True(t, 90*time.Second, "the Lease renewed and the Node Ready again after the outage", func() bool {
		l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil || !l.Spec.RenewTime.After(back) {
			return false
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
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
	n.RemoveManifest("web.yaml")
}
