package status

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/tools/podtable"
	"github.com/nodelet/nodelet/schemas"
)

// TestBusPodLifecycle feeds one pod through the pipeline as the other
// daemons would and follows its status in the bucket.
func TestBusPodLifecycle(t *testing.T) {
	h := newHarness(t)
	h.start(nil)
	pod := apiPod("default", "web", "uid-web", "app")
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}

	// A message that does not decode is skipped and disturbs nothing else.
	if _, err := h.sources.PutRaw(t.Context(), bus.BucketDesired, "garbage", []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	h.desire(pod, schemas.SourceAPI)
	// Nothing is reported before admission decides.
	h.barrier()
	if r, _ := h.record(pod.UID); r != nil {
		t.Fatalf("status written before admission: %+v", r.Status)
	}

	h.admit(pod)
	// Nor before the runtime reports the pod: a status is generated from
	// what the runtime saw, so a restart can never report a running pod
	// as Pending.
	h.barrier()
	if r, _ := h.record(pod.UID); r != nil {
		t.Fatalf("status written before the runtime reported the pod: %+v", r.Status)
	}
	h.observe(pod, creatingObserved(pod))
	r := h.waitRecord(pod.UID, "Pending status", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodPending })
	if w := r.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != ReasonContainerCreating {
		t.Errorf("container state = %+v, want waiting ContainerCreating", r.Status.ContainerStatuses[0].State)
	}
	if r.Status.HostIP != "10.11.12.13" || r.Namespace != "default" || r.Name != "web" || r.Static {
		t.Errorf("record = %+v", r)
	}

	h.observe(pod, runningObserved(pod, "10.88.0.7", 1))
	r = h.waitRecord(pod.UID, "Running", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodRunning })
	if r.Status.PodIP != "10.88.0.7" || r.Status.ContainerStatuses[0].Ready {
		t.Errorf("running before readiness: podIP %q ready %v", r.Status.PodIP, r.Status.ContainerStatuses[0].Ready)
	}

	// The prober's readiness result for this container makes it Ready.
	cid := "containerd://uid-web-app"
	h.put(h.prober, bus.BucketProbes, bus.ProbeKey("uid-web", "app", schemas.ProbeReadiness), &schemas.ProbeResult{
		UID: "uid-web", Namespace: "default", Name: "web", Container: "app", ContainerID: cid, Probe: schemas.ProbeReadiness, Result: schemas.ProbeSuccess})
	h.waitRecord(pod.UID, "Ready", func(r *schemas.PodStatusRecord) bool {
		c := findCondition(r.Status.Conditions, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionTrue
	})

	// Readiness fails: not ready again.
	h.put(h.prober, bus.BucketProbes, bus.ProbeKey("uid-web", "app", schemas.ProbeReadiness), &schemas.ProbeResult{
		UID: "uid-web", Container: "app", ContainerID: cid, Probe: schemas.ProbeReadiness, Result: schemas.ProbeFailure})
	h.waitRecord(pod.UID, "not Ready", func(r *schemas.PodStatusRecord) bool { return !r.Status.ContainerStatuses[0].Ready })

	// Gone from desired: the status stays while the runtime still has it,
	// and goes with the observed state.
	h.del(h.sources, bus.BucketDesired, string(pod.UID))
	h.barrier()
	if r, _ := h.record(pod.UID); r == nil {
		t.Fatal("status deleted while the runtime still reports the pod")
	}
	h.del(h.runtime, bus.BucketObserved, string(pod.UID))
	waitFor(t, 30*time.Second, "the status key to go", func() bool { r, _ := h.record(pod.UID); return r == nil })
}

// TestBusRejectedPod: admission's rejection is the pod's Failed status in
// the bucket.
func TestBusRejectedPod(t *testing.T) {
	h := newHarness(t)
	h.start(nil)
	pod := apiPod("default", "big", "uid-big", "app")
	h.desire(pod, schemas.SourceAPI)
	h.reject(pod, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: 2000")
	r := h.waitRecord(pod.UID, "Failed", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodFailed })
	if r.Status.Reason != "OutOfcpu" || !strings.HasPrefix(r.Status.Message, "Pod was rejected: Node didn't have enough resource") {
		t.Errorf("status = %s / %s", r.Status.Reason, r.Status.Message)
	}
}

// TestBusRestartNeverGoesBackwards restarts nodelet-status: what it wrote
// is not written again when nothing changed, what happened while it was
// down is picked up, and a report that would take a status backwards does
// not.
func TestBusRestartNeverGoesBackwards(t *testing.T) {
	h := newHarness(t)
	s := h.start(nil)
	job := apiPod("default", "job", "uid-job", "main")
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	web := apiPod("default", "web", "uid-web2", "app")
	for _, p := range []*corev1.Pod{job, web} {
		h.desire(p, schemas.SourceAPI)
		h.admit(p)
		h.observe(p, runningObserved(p, "10.88.0.9", 1))
	}
	h.waitRecord(web.UID, "web Running", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodRunning })
	h.waitRecord(job.UID, "job Running", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodRunning })

	// The job completes.
	done := runningObserved(job, "10.88.0.9", 2)
	done.Containers[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	done.Terminated = true
	h.observe(job, done)
	h.waitRecord(job.UID, "job Succeeded", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodSucceeded })
	_, webRev := h.record(web.UID)
	_, jobRev := h.record(job.UID)
	s.stop()

	// While status is down, web's container restarts.
	restarted := runningObserved(web, "10.88.0.9", 2)
	restarted.Containers[0].RestartCount = 1
	restarted.Containers[0].ContainerID = "containerd://uid-web2-app-2"
	h.observe(web, restarted)

	h.start(nil)
	h.waitRecord(web.UID, "web restart counted", func(r *schemas.PodStatusRecord) bool {
		return r.Status.ContainerStatuses[0].RestartCount == 1
	})
	if _, rev := h.record(web.UID); rev == webRev {
		t.Error("web's status was not rewritten although its container restarted")
	}
	h.barrier()
	if r, rev := h.record(job.UID); rev != jobRev {
		t.Errorf("job's unchanged status was written again after the restart (revision %d -> %d): %+v", jobRev, rev, r.Status)
	}

	// A stale report (running again) cannot undo the job's completion.
	h.observe(job, runningObserved(job, "10.88.0.9", 3))
	h.barrier()
	r, _ := h.record(job.UID)
	if r.Status.Phase != corev1.PodSucceeded || r.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("job went backwards: phase %s, state %+v", r.Status.Phase, r.Status.ContainerStatuses[0].State)
	}
}

// TestNodeRecordFollowsRuntime: standalone, the node record's Ready
// condition follows the runtime state, with the runtime's version and the
// machine's capacity. (/healthz, /spec/ and /stats/summary are
// nodelet-server's: services/server TestReadOnlyAPI.)
func TestNodeRecordFollowsRuntime(t *testing.T) {
	h := newHarness(t)
	s := h.start(nil)
	h.put(h.runtime, bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: false, Reason: "RuntimeDown", Message: "containerd socket gone", RuntimeName: "containerd", RuntimeVersion: "1.6.20"})
	waitFor(t, 15*time.Second, "node record NotReady", func() bool {
		rec, _, err := bus.Get[schemas.NodeRecord](t.Context(), h.tap, bus.BucketNode, bus.KeyNode)
		if err != nil || rec == nil || rec.Node == nil {
			return false
		}
		for _, c := range rec.Node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "containerd socket gone")
			}
		}
		return false
	})
	rec, _, _ := bus.Get[schemas.NodeRecord](t.Context(), h.tap, bus.BucketNode, bus.KeyNode)
	if rec.Node.Name != "node-1" || rec.Node.Status.Capacity.Cpu().IsZero() || rec.Node.Status.NodeInfo.ContainerRuntimeVersion != "containerd://1.6.20" {
		t.Errorf("node record: name %s capacity %v nodeInfo %+v", rec.Node.Name, rec.Node.Status.Capacity, rec.Node.Status.NodeInfo)
	}
	// nodelet-status's own metrics, which nodelet-server federates into /metrics.
	m := metricsText(t, s.Daemon)
	for _, name := range []string{"nodelet_running_pods", "nodelet_running_containers", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(m, name) {
			t.Errorf("metrics lack %s", name)
		}
	}
}

// TestBusMetrics: the pod start duration is observed once per pod, when
// all its containers first run.
func TestBusMetrics(t *testing.T) {
	h := newHarness(t)
	s := h.start(nil)
	pod := apiPod("default", "m", "uid-m", "a", "b")
	pod.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Second))
	h.desire(pod, schemas.SourceAPI)
	h.admit(pod)
	h.observe(pod, runningObserved(pod, "10.88.0.3", 1))
	h.waitRecord(pod.UID, "Running", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodRunning })
	waitFor(t, 10*time.Second, "metrics", func() bool {
		m := metricsText(t, s.Daemon)
		return strings.Contains(m, "nodelet_pod_start_duration_seconds_count 1") &&
			strings.Contains(m, "nodelet_running_pods 1") &&
			strings.Contains(m, `nodelet_running_containers{container_state="running"} 2`) &&
			strings.Contains(m, `nodelet_pod_worker_duration_seconds_count{operation_type="create"}`) &&
			// The kubelet's names of the same facts.
			strings.Contains(m, "kubelet_pod_start_duration_seconds_count 1") &&
			strings.Contains(m, "kubelet_pod_start_total_duration_seconds_count 1") &&
			strings.Contains(m, "kubelet_pod_start_sli_duration_seconds_count 1") &&
			strings.Contains(m, `kubelet_node_name{node="node-1"} 1`)
	})
}

// TestLoadPodsTable is `nodelet pods`: the table built from the desired and
// status buckets through the read-only tap credential.
func TestLoadPodsTable(t *testing.T) {
	h := newHarness(t)
	h.start(nil)
	web := apiPod("default", "web", "uid-t1", "app")
	big := apiPod("team", "big", "uid-t2", "app")
	waiting := apiPod("team", "later", "uid-t3", "app")
	for _, p := range []*corev1.Pod{web, big, waiting} {
		h.desire(p, schemas.SourceAPI)
	}
	h.admit(web)
	h.observe(web, runningObserved(web, "10.88.0.4", 1))
	h.reject(big, "OutOfmemory", "Node didn't have enough resource: memory")
	h.waitRecord(web.UID, "web Running", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodRunning })
	h.waitRecord(big.UID, "big Failed", func(r *schemas.PodStatusRecord) bool { return r.Status.Phase == corev1.PodFailed })

	pods, err := podtable.LoadPods(t.Context(), h.tap)
	if err != nil {
		t.Fatal(err)
	}
	rows := podtable.PodRows(pods, time.Now())
	got := map[string]podtable.PodRow{}
	for _, r := range rows {
		got[r.Namespace+"/"+r.Name] = r
	}
	if r := got["default/web"]; r.Ready != "1/1" || r.Status != "Running" || r.IP != "10.88.0.4" || r.Restarts != "0" || r.Age == "<unknown>" {
		t.Errorf("web row = %+v", r)
	}
	if r := got["team/big"]; r.Status != "OutOfmemory" || r.Ready != "0/1" {
		t.Errorf("big row = %+v", r)
	}
	if r := got["team/later"]; r.Status != "Pending" || r.IP != "<none>" {
		t.Errorf("later row = %+v", r)
	}
	if len(rows) != 3 || rows[0].Namespace != "default" {
		t.Errorf("rows = %+v", rows)
	}
}

// TestNodeRecordReportedWhenDue: with nothing changing, the node status is
// still reported every nodeStatusReportFrequency.
func TestNodeRecordReportedWhenDue(t *testing.T) {
	h := newHarness(t)
	h.cfg.Status.NodeStatusUpdateFrequency = 200 * time.Millisecond
	h.cfg.Status.NodeStatusReportFrequency = time.Second
	h.put(h.runtime, bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: true, NetworkReady: true})
	h.start(nil)
	heartbeat := func() time.Time {
		rec, _, err := bus.Get[schemas.NodeRecord](t.Context(), h.tap, bus.BucketNode, bus.KeyNode)
		if err != nil || rec == nil {
			return time.Time{}
		}
		for _, c := range rec.Node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.LastHeartbeatTime.Time
			}
		}
		return time.Time{}
	}
	waitFor(t, 10*time.Second, "a node record", func() bool { return !heartbeat().IsZero() })
	first := heartbeat()
	waitFor(t, 15*time.Second, "the next report", func() bool { return heartbeat().After(first) })
}
