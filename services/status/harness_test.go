package status

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// harness is a real bus with a connection per component, so tests publish
// desired pods as sources, verdicts as admission, observed state as the
// runtime and so on, exactly as those daemons do.
type harness struct {
	t                                            *testing.T
	b                                            *bustest.Bus
	cfg                                          *config.Config
	sources, admission, runtime, prober, gc, tap *bus.Conn
	barriers                                     int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	b := bustest.Start(t)
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.Address = "10.11.12.13"
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = t.TempDir()
	cfg.Status.NodeStatusUpdateFrequency = time.Second
	cfg.Status.HeartbeatStaleAfter = 3 * time.Second
	return &harness{
		t: t, b: b, cfg: cfg,
		sources: b.Connect(bus.Sources), admission: b.Connect(bus.Admission), runtime: b.Connect(bus.Runtime),
		prober: b.Connect(bus.Prober), gc: b.Connect(bus.GC), tap: b.Connect(bus.Tap),
	}
}

// running is a started Daemon; stop cancels it and waits for Run.
type runningSvc struct {
	*Daemon
	stop func()
}

func (h *harness) start(mut func(*Options)) *runningSvc {
	h.t.Helper()
	o := Options{Deps: daemon.Deps{Config: h.cfg, Log: bustest.Logger(), Bus: h.b.Connect(bus.Status)}}
	if mut != nil {
		mut(&o)
	}
	s, err := New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return &runningSvc{Daemon: s, stop: testenv.Start(h.t, s.Run)}
}

func (h *harness) put(c *bus.Conn, bucket, key string, m schemas.Message) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, bucket, key, m); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) del(c *bus.Conn, bucket, key string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Delete(ctx, bucket, key); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) desire(pod *corev1.Pod, source string) {
	h.t.Helper()
	h.put(h.sources, bus.BucketDesired, string(pod.UID), &schemas.PodDesired{Pod: pod, Source: source, FirstSeen: time.Now().UTC()})
}

func (h *harness) admit(pod *corev1.Pod) {
	h.t.Helper()
	h.put(h.admission, bus.BucketAdmission, string(pod.UID), &schemas.AdmissionVerdict{
		UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Admitted: true, DecidedAt: time.Now().UTC()})
}

func (h *harness) reject(pod *corev1.Pod, reason, msg string) {
	h.t.Helper()
	h.put(h.admission, bus.BucketAdmission, string(pod.UID), &schemas.AdmissionVerdict{
		UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Reason: reason, Message: msg, DecidedAt: time.Now().UTC()})
}

func (h *harness) observe(pod *corev1.Pod, o schemas.PodObserved) {
	h.t.Helper()
	o.UID, o.Namespace, o.Name = string(pod.UID), pod.Namespace, pod.Name
	h.put(h.runtime, bus.BucketObserved, string(pod.UID), &o)
}

// record reads the status bucket as another reader would.
func (h *harness) record(uid types.UID) (*schemas.PodStatusRecord, uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, rev, err := bus.Get[schemas.PodStatusRecord](ctx, h.tap, bus.BucketStatus, string(uid))
	if err != nil {
		h.t.Fatal(err)
	}
	return r, rev
}

// waitRecord waits until the status bucket's record of uid satisfies ok.
func (h *harness) waitRecord(uid types.UID, what string, ok func(*schemas.PodStatusRecord) bool) *schemas.PodStatusRecord {
	h.t.Helper()
	var last *schemas.PodStatusRecord
	waitFor(h.t, 30*time.Second, what, func() bool {
		last, _ = h.record(uid)
		return last != nil && ok(last)
	})
	return last
}

// barrier runs a marker pod through the desired, admission and observed
// buckets and waits for its status record. Each bucket is watched in order
// and a record needs all three, so every update put before the barrier has
// been handled — and anything status would write because of it written —
// by the time it returns: what a test asserts did not happen, did not.
func (h *harness) barrier() {
	h.t.Helper()
	h.barriers++
	p := apiPod("barrier", fmt.Sprintf("barrier-%d", h.barriers), types.UID(fmt.Sprintf("uid-barrier-%d", h.barriers)), "app")
	h.desire(p, schemas.SourceAPI)
	h.admit(p)
	h.observe(p, creatingObserved(p))
	h.waitRecord(p.UID, "the barrier pod's status", func(*schemas.PodStatusRecord) bool { return true })
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	eventually.True(t, timeout, what, ok)
}

// metricsText is nodelet-status's metrics as nodelet-server scrapes them
// from its metrics socket.
func metricsText(t *testing.T, s *Daemon) string {
	t.Helper()
	fams, err := s.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// apiPod is a pod of the test namespace ns bound to the node.
func apiPod(ns, name string, uid types.UID, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec: corev1.PodSpec{NodeName: "node-1", RestartPolicy: corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: new(int64), AutomountServiceAccountToken: new(bool)},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile})
	}
	return p
}

// runningObserved is the runtime's report of a pod with every container
// running in a ready sandbox with ip.
func runningObserved(pod *corev1.Pod, ip string, gen uint64) schemas.PodObserved {
	o := schemas.PodObserved{Sandbox: &schemas.SandboxObserved{ID: "sb-" + string(pod.UID), Ready: true, IPs: []string{ip}, CreatedAt: time.Now().UTC()}, Generation: gen}
	for _, c := range pod.Spec.Containers {
		o.Containers = append(o.Containers, schemas.ContainerObserved{
			Name: c.Name, Kind: schemas.ContainerKindApp, ContainerID: "containerd://" + string(pod.UID) + "-" + c.Name,
			Image: "nodelet.local/busybox:1.35", ImageID: "sha256:0123",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}},
		})
	}
	return o
}

// creatingObserved is what the runtime first publishes for a pod it starts
// working on: no sandbox yet, every container waiting in ContainerCreating.
func creatingObserved(pod *corev1.Pod) schemas.PodObserved {
	o := schemas.PodObserved{Generation: 1}
	for _, c := range pod.Spec.Containers {
		o.Containers = append(o.Containers, schemas.ContainerObserved{Name: c.Name, Kind: schemas.ContainerKindApp,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}}})
	}
	return o
}

// heartbeat publishes a heartbeat as c's component.
func heartbeatOf(t *testing.T, c *bus.Conn, ready bool, msg string) {
	t.Helper()
	if err := c.PublishHeartbeat(schemas.Heartbeat{Component: c.Component, PID: os.Getpid(), StartTime: time.Now(), Ready: ready, Message: msg}); err != nil {
		t.Fatal(err)
	}
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}
