package status

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// startAPI runs nodelet-status with the node's identity against the test
// control plane.
// leaseRenewedTwice waits until nodelet-status has renewed node-1's Lease
// twice: status's own loop is the clock of tests that assert something did
// not happen while it ran.
func leaseRenewedTwice(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	renewed := func() time.Time {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctxT(t), "node-1", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	for i := range 2 {
		first := renewed()
		waitFor(t, 30*time.Second, fmt.Sprintf("lease renewal %d", i+1), func() bool { return renewed().After(first) })
	}
}

func (h *harness) startAPI(mut func(*Options)) *runningSvc {
	h.t.Helper()
	return h.start(func(o *Options) {
		o.Kube = cp.NodeClient(h.t)
		o.EventsKube = cp.NodeClient(h.t)
		if mut != nil {
			mut(o)
		}
	})
}

func (h *harness) runtimeReady() {
	h.t.Helper()
	h.put(h.runtime, bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{
		RuntimeReady: true, NetworkReady: true, RuntimeName: "containerd", RuntimeVersion: "1.6.20", PodCIDR: "10.88.0.0/16"})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitPod polls the API pod until ok.
func waitPod(t *testing.T, c kubernetes.Interface, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	var lastErr error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		last, lastErr = c.CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
		if lastErr == nil && ok(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("timed out waiting for %s; pod status: %+v (err %v)", what, last.Status, lastErr)
	}
	t.Fatalf("timed out waiting for %s: %v", what, lastErr)
	return nil
}

func nodeCondOf(n *corev1.Node, ct corev1.NodeConditionType) *corev1.NodeCondition {
	return nodeCond(n, ct)
}

// TestAPINodeAndLease registers the Node with cAdvisor's capacity, keeps it
// Ready from the runtime's state, reports status only when it changes (the
// report period is long here), and renews the Lease only while running.
func TestAPINodeAndLease(t *testing.T) {
	h := newHarness(t)
	h.cfg.Node.Labels = map[string]string{"nodelet.test/role": "api"}
	h.cfg.Node.Taints = []config.Taint{{Key: "nodelet.test/dedicated", Value: "yes", Effect: "NoSchedule"}}
	h.cfg.Status.NodeLeaseDurationSeconds = 8 // renewed every 2s
	h.cfg.Status.NodeStatusReportFrequency = time.Hour
	h.runtimeReady()
	s := h.startAPI(nil)
	admin := cp.AdminClient(t)

	var node *corev1.Node
	waitFor(t, 60*time.Second, "node-1 Ready", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctxT(t), "node-1", metav1.GetOptions{})
		if err != nil {
			return false
		}
		node = n
		c := nodeCondOf(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	info, err := s.machineInfo()
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Status.Capacity.Cpu().Value(); got != int64(info.NumCores) {
		t.Errorf("cpu capacity %d, cAdvisor says %d cores", got, info.NumCores)
	}
	if got := node.Status.Capacity.Memory().Value(); got != int64(info.MemoryCapacity) {
		t.Errorf("memory capacity %d, cAdvisor says %d", got, info.MemoryCapacity)
	}
	if node.Status.Capacity.StorageEphemeral().IsZero() || node.Status.Allocatable.Memory().Cmp(*node.Status.Capacity.Memory()) >= 0 {
		t.Errorf("capacity %v allocatable %v", node.Status.Capacity, node.Status.Allocatable)
	}
	if node.Labels["nodelet.test/role"] != "api" || node.Labels[corev1.LabelOSStable] != "linux" || node.Labels[corev1.LabelHostname] == "" {
		t.Errorf("labels = %v", node.Labels)
	}
	// (The API server's TaintNodesByCondition admission adds not-ready.)
	hasTaint := false
	for _, tn := range node.Spec.Taints {
		hasTaint = hasTaint || (tn.Key == "nodelet.test/dedicated" && tn.Value == "yes" && tn.Effect == corev1.TaintEffectNoSchedule)
	}
	if !hasTaint {
		t.Errorf("taints = %v", node.Spec.Taints)
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != "containerd://1.6.20" || node.Status.NodeInfo.KubeletVersion == "" {
		t.Errorf("nodeInfo = %+v", node.Status.NodeInfo)
	}
	if len(node.Status.Addresses) == 0 || node.Status.Addresses[0].Address != "10.11.12.13" {
		t.Errorf("addresses = %v", node.Status.Addresses)
	}

	// The network goes down: reported at once, NotReady with the runtime's words.
	h.put(h.runtime, bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: true, RuntimeName: "containerd", RuntimeVersion: "1.6.20",
		Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"})
	waitFor(t, 30*time.Second, "node-1 NotReady", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctxT(t), "node-1", metav1.GetOptions{})
		c := nodeCondOf(n, corev1.NodeReady)
		return err == nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "cni config uninitialized")
	})
	h.runtimeReady()

	// The Lease: held by node-1, owned by the Node, renewed every 2s.
	leases := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renewTime := func() time.Time {
		l, err := leases.Get(ctxT(t), "node-1", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	waitFor(t, 30*time.Second, "the Lease", func() bool { return !renewTime().IsZero() })
	l, _ := leases.Get(ctxT(t), "node-1", metav1.GetOptions{})
	if *l.Spec.HolderIdentity != "node-1" || *l.Spec.LeaseDurationSeconds != 8 || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease = %+v", l)
	}
	advancing := func(what string) {
		t.Helper()
		first := renewTime()
		waitFor(t, 20*time.Second, what, func() bool { return renewTime().After(first) })
	}
	// Nothing changes: no status report within the (hour-long) report
	// period, while two renewals prove status's node loop kept running.
	var hb metav1.Time
	waitFor(t, 30*time.Second, "node-1 Ready again", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctxT(t), "node-1", metav1.GetOptions{})
		c := nodeCondOf(n, corev1.NodeReady)
		hb = c.LastHeartbeatTime
		return err == nil && c.Status == corev1.ConditionTrue
	})
	advancing("renewTime to advance")
	advancing("renewTime to advance again")
	if n, _ := admin.CoreV1().Nodes().Get(ctxT(t), "node-1", metav1.GetOptions{}); !nodeCondOf(n, corev1.NodeReady).LastHeartbeatTime.Equal(&hb) {
		t.Errorf("node status reported without a change: heartbeat %v -> %v", hb, nodeCondOf(n, corev1.NodeReady).LastHeartbeatTime)
	}

	s.stop()
	stopped := renewTime()
	time.Sleep(6 * time.Second) // three renew intervals
	if got := renewTime(); !got.Equal(stopped) {
		t.Errorf("renewTime moved while nodelet-status was stopped: %v -> %v", stopped, got)
	}
	h.startAPI(nil)
	advancing("renewTime to advance after the restart")

	// BirthCry: a Starting event for the node, from the kubelet's source.
	waitFor(t, 30*time.Second, "the Starting event", func() bool {
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxT(t), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": "node-1", "reason": EventStarting}.String()})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Source.Component == EventSourceComponent && evs.Items[0].Source.Host == "node-1"
	})
}

// TestAPIPodStatus: an API pod goes Pending -> Running and Ready in the API
// with its pod IP and container statuses; kubectl shows it Running; deleted
// with a grace period, the object goes once the runtime has stopped it.
func TestAPIPodStatus(t *testing.T) {
	h := newHarness(t)
	h.cfg.Status.NodeLeaseDurationSeconds = 4 // renewed every second: the test's clock
	h.runtimeReady()
	s := h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), apiPod(ns, "web", "", "app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(created, schemas.SourceAPI)
	h.admit(created)
	h.observe(created, creatingObserved(created))
	waitPod(t, admin, ns, "web", "Pending with ContainerCreating", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodPending && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Waiting != nil && p.Status.ContainerStatuses[0].State.Waiting.Reason == ReasonContainerCreating
	})

	h.observe(created, runningObserved(created, "10.88.0.20", 1))
	p := waitPod(t, admin, ns, "web", "Running and Ready", func(p *corev1.Pod) bool {
		c := findCondition(p.Status.Conditions, corev1.PodReady)
		return p.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
	})
	cs := p.Status.ContainerStatuses[0]
	if p.Status.PodIP != "10.88.0.20" || p.Status.HostIP != "10.11.12.13" || cs.ContainerID != "containerd://"+string(created.UID)+"-app" ||
		!cs.Ready || cs.Started == nil || !*cs.Started || cs.State.Running == nil || cs.ImageID != "sha256:0123" {
		t.Errorf("API status = %+v", p.Status)
	}
	if findCondition(p.Status.Conditions, corev1.PodScheduled) == nil || p.Status.StartTime == nil || p.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("API status = %+v", p.Status)
	}
	out, err := exec.Command(cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "get", "pod", "-n", ns, "web", "--no-headers").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Running") || !strings.Contains(string(out), "1/1") {
		t.Errorf("kubectl get pod: %v\n%s", err, out)
	}
	// Patches only on change: nothing more is written once converged.
	rv := p.ResourceVersion
	leaseRenewedTwice(t, admin)
	if p2, _ := admin.CoreV1().Pods(ns).Get(ctxT(t), "web", metav1.GetOptions{}); p2.ResourceVersion != rv {
		t.Errorf("pod written again without a change: %+v", p2.Status)
	}

	// Graceful deletion: the API marks it; sources passes the deletion
	// timestamp on; the runtime stops it; status finishes the deletion.
	if err := admin.CoreV1().Pods(ns).Delete(ctxT(t), "web", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(30))}); err != nil {
		t.Fatal(err)
	}
	deleting := waitPod(t, admin, ns, "web", "a deletion timestamp", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	h.desire(deleting, schemas.SourceAPI)
	leaseRenewedTwice(t, admin)
	if _, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod deleted while its containers still ran: %v", err)
	}
	stopped := runningObserved(created, "10.88.0.20", 2)
	stopped.Terminated = true
	stopped.Sandbox.Ready = false
	stopped.Containers[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}}
	h.observe(created, stopped)
	// Stopped, its phase is terminal; the object stays until the runtime
	// has unmounted its volumes and removed its cgroup (the kubelet's
	// canBeDeleted waits for podIsFinished).
	waitPod(t, admin, ns, "web", "a terminal phase", func(p *corev1.Pod) bool { return podutil.IsTerminalPhase(p.Status.Phase) })
	leaseRenewedTwice(t, admin)
	if _, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod deleted before the runtime finished with it: %v", err)
	}
	finished := stopped
	finished.Generation++
	finished.Finished = true
	h.observe(created, finished)
	waitFor(t, 60*time.Second, "the pod object to go", func() bool {
		_, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	_ = s
}

// TestAPIRejectedPod: admission's OutOfcpu is the pod's Failed status in the
// API.
func TestAPIRejectedPod(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), apiPod(ns, "huge", "", "app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(created, schemas.SourceAPI)
	h.reject(created, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: 2000")
	p := waitPod(t, admin, ns, "huge", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != "OutOfcpu" || !strings.Contains(p.Status.Message, "Node didn't have enough resource: cpu") {
		t.Errorf("status = %s: %s", p.Status.Reason, p.Status.Message)
	}
}

// TestAPIMirrorPod: a static pod's mirror pod appears with the static pod's
// status; deleted, it comes back; a new version of the static pod replaces
// it; gone from the node, it goes.
func TestAPIMirrorPod(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)

	static := apiPod(ns, "etcd-node-1", "static-uid-1", "etcd")
	static.Annotations = map[string]string{podutil.AnnotationConfigSource: "file", podutil.AnnotationConfigHash: "hash-1", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"}
	h.desire(static, schemas.SourceFile)
	h.admit(static)
	h.observe(static, runningObserved(static, "10.88.0.30", 1))
	mirror := waitPod(t, admin, ns, "etcd-node-1", "the mirror pod running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP == "10.88.0.30"
	})
	if mirror.Annotations[podutil.AnnotationConfigMirror] != "hash-1" || len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].Kind != "Node" {
		t.Errorf("mirror pod meta = %+v", mirror.ObjectMeta)
	}
	if mirror.UID == static.UID {
		t.Error("the mirror pod has the static pod's UID")
	}
	if c := findCondition(mirror.Status.Conditions, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("mirror pod not Ready: %+v", mirror.Status.Conditions)
	}

	// Deleting the mirror pod recreates it.
	if err := admin.CoreV1().Pods(ns).Delete(ctxT(t), mirror.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitPod(t, admin, ns, "etcd-node-1", "a new mirror pod", func(p *corev1.Pod) bool {
		return p.UID != mirror.UID && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
	})

	// A new version of the static pod (new hash): the mirror is replaced.
	v2 := static.DeepCopy()
	v2.Annotations[podutil.AnnotationConfigHash] = "hash-2"
	v2.Spec.Containers[0].Image = "busybox:2"
	h.desire(v2, schemas.SourceFile)
	waitPod(t, admin, ns, "etcd-node-1", "the mirror of the new version", func(p *corev1.Pod) bool {
		return p.UID != again.UID && p.Annotations[podutil.AnnotationConfigMirror] == "hash-2" && p.Spec.Containers[0].Image == "busybox:2"
	})

	// The manifest is removed: the mirror goes with the static pod.
	h.del(h.sources, bus.BucketDesired, string(static.UID))
	waitFor(t, 60*time.Second, "the mirror pod to go", func() bool {
		_, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "etcd-node-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestAPIEvents: events on the bus reach the API with the kubelet's source;
// a repeat is counted on the same object.
func TestAPIEvents(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "web", UID: "uid-ev", FieldPath: "spec.containers{app}"}
	now := time.Now().UTC()
	h.runtime.Emit(schemas.Event{Object: ref, Type: corev1.EventTypeNormal, Reason: "Pulled", Message: `Container image "busybox" already present on machine`, Time: now})
	h.runtime.Emit(schemas.Event{Object: ref, Type: corev1.EventTypeWarning, Reason: "BackOff", Message: "Back-off restarting failed container app", Time: now.Add(time.Second)})
	h.runtime.Emit(schemas.Event{Object: ref, Type: corev1.EventTypeWarning, Reason: "BackOff", Message: "Back-off restarting failed container app", Time: now.Add(2 * time.Second)})
	// A message on the stream that does not decode is skipped.
	if _, err := h.prober.JS.Publish(t.Context(), bus.EventSubject(bus.Prober, "uid-ev"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	h.prober.Emit(schemas.Event{Object: ref, Type: corev1.EventTypeWarning, Reason: "Unhealthy", Message: "Readiness probe failed: connection refused", Time: now.Add(3 * time.Second)})

	byReason := map[string]corev1.Event{}
	err := eventually.Poll(t.Context(), clock.RealClock{}, 60*time.Second, eventually.Interval, func() error {
		evs, err := admin.CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{})
		if err != nil {
			return err
		}
		byReason = map[string]corev1.Event{}
		for _, e := range evs.Items {
			if _, dup := byReason[e.Reason]; dup {
				return fmt.Errorf("two %s events", e.Reason)
			}
			byReason[e.Reason] = e
		}
		if len(byReason) != 3 || byReason["BackOff"].Count != 2 {
			return fmt.Errorf("events so far: %d, BackOff count %d", len(evs.Items), byReason["BackOff"].Count)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e := byReason["Pulled"]
	if e.Source.Component != EventSourceComponent || e.Source.Host != "node-1" || e.InvolvedObject.UID != types.UID("uid-ev") ||
		e.InvolvedObject.FieldPath != "spec.containers{app}" || e.Type != corev1.EventTypeNormal || e.Count != 1 {
		t.Errorf("Pulled event = %+v", e)
	}
	if !byReason["BackOff"].FirstTimestamp.Time.Equal(now.Add(time.Second).Truncate(time.Second)) || byReason["BackOff"].LastTimestamp.Time.Before(now.Add(2*time.Second).Truncate(time.Second)) {
		t.Errorf("BackOff timestamps = %v .. %v", byReason["BackOff"].FirstTimestamp, byReason["BackOff"].LastTimestamp)
	}
}

// TestAPIEventsOutliveTheirNamespace: an event whose namespace is gone by
// the time it is posted (the e2e suite deletes a namespace per spec, and
// events wait their turn in the queue) is given up, and the events after
// it still reach the API. Before issue 37's fix the poster retried the
// API's NotFound forever and the node's events stopped for good.
func TestAPIEventsOutliveTheirNamespace(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	svc := h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	// NamespaceLifecycle answers a create in a deleted namespace and in
	// one that never existed alike: NotFound for the namespace.
	gone := ns + "-gone"
	now := time.Now().UTC()
	h.runtime.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: gone, Name: "web", UID: "uid-gone"},
		Type: corev1.EventTypeNormal, Reason: "Killing", Message: "Stopping container app", Time: now})
	h.runtime.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web", UID: "uid-after"},
		Type: corev1.EventTypeNormal, Reason: "Pulled", Message: `Container image "busybox" already present on machine`, Time: now.Add(time.Millisecond)})
	waitFor(t, 60*time.Second, "the event after the gone namespace's to reach the API", func() bool {
		evs, err := admin.CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == "Pulled"
	})
	if got := testutil.ToFloat64(svc.metrics.eventsDropped.WithLabelValues("rejected")); got != 1 {
		t.Errorf(`nodelet_events_dropped_total{reason="rejected"} = %v, want 1`, got)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestAPIEphemeralContainerAndDeadline (after TestAPINodeAndLease, which
// must be the first to register node-1): the e2e specs' two updates of a
// running API pod. An ephemeral container added through the
// pods/ephemeralcontainers subresource shows in the API's
// ephemeralContainerStatuses once the runtime runs it; a deadline set on
// the running pod, once the runtime has killed it for it, makes the API
// pod Failed with reason DeadlineExceeded and the kubelet's message.
func TestAPIEphemeralContainerAndDeadline(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), apiPod(ns, "debugged", "", "app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(created, schemas.SourceAPI)
	h.admit(created)
	obs := runningObserved(created, "10.88.0.21", 1)
	h.observe(created, obs)
	waitPod(t, admin, ns, "debugged", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// kubectl debug: the subresource adds the container.
	withDebug, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "debugged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withDebug.Spec.EphemeralContainers = append(withDebug.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
			ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile},
		TargetContainerName: "app"})
	if withDebug, err = admin.CoreV1().Pods(ns).UpdateEphemeralContainers(ctxT(t), "debugged", withDebug, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.desire(withDebug, schemas.SourceAPI)
	obs.Generation++
	obs.EphemeralContainers = []schemas.ContainerObserved{{Name: "debugger", Kind: schemas.ContainerKindEphemeral,
		ContainerID: "containerd://" + string(created.UID) + "-debugger", Image: "nodelet.local/busybox:1.35", ImageID: "sha256:0123",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now().Rfc3339Copy()}}}}
	h.observe(created, obs)
	p := waitPod(t, admin, ns, "debugged", "the ephemeral container running", func(p *corev1.Pod) bool {
		return len(p.Status.EphemeralContainerStatuses) == 1 && p.Status.EphemeralContainerStatuses[0].State.Running != nil
	})
	if es := p.Status.EphemeralContainerStatuses[0]; es.Name != "debugger" || es.ContainerID != obs.EphemeralContainers[0].ContainerID || es.Ready {
		t.Fatalf("ephemeral container status: %+v", es)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod status: %+v", p.Status)
	}

	// The deadline lowered on the running pod; the runtime kills it.
	p.Spec.ActiveDeadlineSeconds = ptrTo(int64(1))
	updated, err := admin.CoreV1().Pods(ns).Update(ctxT(t), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(updated, schemas.SourceAPI)
	killed := obs
	killed.Generation++
	killed.Terminated, killed.Sandbox.Ready = true, false
	killed.Reason, killed.Message = podutil.ReasonDeadlineExceeded, podutil.MessageDeadlineExceeded
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
	killed.Containers = []schemas.ContainerObserved{obs.Containers[0]}
	killed.Containers[0].State = exited
	killed.EphemeralContainers = []schemas.ContainerObserved{obs.EphemeralContainers[0]}
	killed.EphemeralContainers[0].State = exited
	h.observe(created, killed)
	p = waitPod(t, admin, ns, "debugged", "Failed with DeadlineExceeded", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == podutil.ReasonDeadlineExceeded
	})
	if p.Status.Message != podutil.MessageDeadlineExceeded || p.Status.EphemeralContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod status: %+v", p.Status)
	}
}

// TestAPINodeRegistersAgainAfterDeletion: the Node object deleted under a
// running node is registered again (a new object, Ready, with the node's
// labels), at the next status update.
func TestAPINodeRegistersAgainAfterDeletion(t *testing.T) {
	h := newHarness(t)
	h.cfg.Node.Labels = map[string]string{"nodelet.test/again": "yes"}
	h.cfg.Status.NodeStatusUpdateFrequency = time.Second
	h.runtimeReady()
	h.startAPI(nil)
	admin := cp.AdminClient(t)
	readyNode := func(what string, ok func(*corev1.Node) bool) *corev1.Node {
		t.Helper()
		var node *corev1.Node
		waitFor(t, 60*time.Second, what, func() bool {
			n, err := admin.CoreV1().Nodes().Get(ctxT(t), "node-1", metav1.GetOptions{})
			if err != nil {
				return false
			}
			c := nodeCondOf(n, corev1.NodeReady)
			node = n
			return c != nil && c.Status == corev1.ConditionTrue && ok(n)
		})
		return node
	}
	first := readyNode("node-1 Ready", func(*corev1.Node) bool { return true })
	if err := admin.CoreV1().Nodes().Delete(ctxT(t), "node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := readyNode("node-1 registered again", func(n *corev1.Node) bool { return n.UID != first.UID })
	if again.Labels["nodelet.test/again"] != "yes" || again.Labels[corev1.LabelHostname] == "" || again.Status.Capacity.Cpu().IsZero() {
		t.Fatalf("re-registered node: labels %v capacity %v", again.Labels, again.Status.Capacity)
	}
}
