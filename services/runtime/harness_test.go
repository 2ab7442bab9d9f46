package runtime

import (
	"strings"

	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

// One private containerd serves every real-runtime test of the package;
// each test removes its pods when it ends.
var (
	ctrdOnce sync.Once
	ctrd     *testenv.Containerd
	ctrdErr  error
)

// The control plane (etcd + kube-apiserver) is started by the first test
// that needs it.
var controlPlane = testenv.SharedControlPlane{NodeName: "node-1"}

// testCgroupRoot is this test process's runtime.cgroupRoot: a runtime
// removes the pod cgroups under its root that it does not know, so test
// processes running side by side must not share one.
var testCgroupRoot = fmt.Sprintf("/nodelet-test-%d", os.Getpid())

// testCgroupDriver is the cgroup driver of the package's runtimes and of
// its containerd (SystemdCgroup): NODELET_TEST_CGROUP_DRIVER, cgroupfs
// by default. internal/e2e's TestCgroupsUnderSystemdDriver runs this
// binary with "systemd" under a real systemd (a systemd-nspawn machine),
// where the cgroup root is the kubelet's kubepods (kubepods.slice): the
// machine is the node's only runtime.
var testCgroupDriver = func() string {
	if d := os.Getenv("NODELET_TEST_CGROUP_DRIVER"); d != "" {
		return d
	}
	return cgroups.DriverCgroupfs
}()

func init() {
	if testCgroupDriver == cgroups.DriverSystemd {
		testCgroupRoot = "/kubepods"
	}
}

func TestMain(m *testing.M) {
	// A CSI test driver started by csitest.Start is this binary too.
	csitest.MainIfDriver()
	code := m.Run()
	if ctrd != nil {
		ctrd.Stop()
	}
	removeTestCgroupRoot()
	if ctl != nil {
		ctl.Stop()
	}
	controlPlane.Stop()
	os.Exit(code)
}

func sharedControlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	return controlPlane.Get(t)
}

func sharedContainerd(t *testing.T) *testenv.Containerd {
	t.Helper()
	testenv.RequiresRoot(t)
	ctrdOnce.Do(func() {
		ctrd, ctrdErr = testenv.StartContainerd(testenv.ContainerdOptions{SystemdCgroup: testCgroupDriver == cgroups.DriverSystemd})
	})
	if ctrdErr != nil {
		t.Fatalf("containerd: %v", ctrdErr)
	}
	return ctrd
}

// harness is a nodelet-runtime on a real bus and a real containerd, fed
// by the test acting as sources and admission.
type harness struct {
	t         *testing.T
	ctx       context.Context
	ctrd      *testenv.Containerd
	bus       *bustest.Bus
	sources   *bus.Conn
	admission *bus.Conn
	prober    *bus.Conn
	gc        *bus.Conn
	status    *bus.Conn
	cfg       *config.Config
	cri       *testenv.CRI
	obs       *observedLog
	events    *eventLog

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	m      *Daemon
}

type harnessOptions struct {
	// containerd, when set, replaces the package's shared containerd.
	containerd *testenv.Containerd
	configure  func(*config.Config)
	options    func(*Options)
	noStart    bool
}

func newHarness(t *testing.T, ho harnessOptions) *harness {
	t.Helper()
	c := ho.containerd
	if c == nil {
		c = sharedContainerd(t)
	}
	b := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	h := &harness{
		t: t, ctx: ctx, ctrd: c, bus: b,
		sources: b.Connect(bus.Sources), admission: b.Connect(bus.Admission),
		prober: b.Connect(bus.Prober), gc: b.Connect(bus.GC), status: b.Connect(bus.Status),
		cri: c.RuntimeClient(t),
	}
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = t.TempDir()
	cfg.Node.ResolvConf = "/etc/resolv.conf"
	cfg.Runtime.Endpoint = c.Endpoint
	cfg.Runtime.CNIConfDir = c.CNIConfDir
	cfg.Runtime.CNIBinDirs = []string{c.CNIBinDir}
	cfg.Runtime.ManageCNIConfig = false
	cfg.Runtime.RelistPeriod = 500 * time.Millisecond
	cfg.Runtime.CgroupRoot = testCgroupRoot
	cfg.Runtime.CgroupDriver = testCgroupDriver
	cfg.Runtime.SandboxImage = images.PauseImage
	if ho.configure != nil {
		ho.configure(cfg)
	}
	h.cfg = cfg
	h.obs = watchObserved(t, ctx, h.status)
	h.events = recordEvents(t, b.Connect(bus.Tap))
	t.Cleanup(h.removeAllPods)
	if !ho.noStart {
		h.start(ho.options)
	}
	return h
}

// start runs a Daemon in this process until the test ends (or stop).
func (h *harness) start(opt func(*Options)) {
	h.t.Helper()
	// As the daemon dials: every call counted (kubelet_runtime_operations_*).
	clients, err := cri.Dial(h.ctx, &h.cfg.Runtime)
	if err != nil {
		h.t.Fatal(err)
	}
	opts := Options{
		Deps:    daemon.Deps{Config: h.cfg, Log: bustest.Logger().With("component", "runtime"), Bus: h.bus.Connect(bus.Runtime)},
		Runtime: clients.Runtime,
		Image:   clients.Image,
	}
	if opt != nil {
		opt(&opts)
	}
	m, err := New(opts)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(ctx); err != nil {
			h.t.Errorf("runtime: %v", err)
		}
	}()
	h.mu.Lock()
	h.m, h.cancel, h.done = m, cancel, done
	h.mu.Unlock()
	h.t.Cleanup(h.stop)
}

func (h *harness) stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel = nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// removeAllPods leaves the shared containerd empty for the next test.
func (h *harness) removeAllPods() {
	h.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := h.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, sb := range resp.Items {
		_, _ = h.cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
		_, _ = h.cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
	}
	// Pods still running at the end keep their volume mounts (tmpfs,
	// subPath binds): unmount them so the state dir can go.
	for _, mp := range testenv.MountsUnder(h.cfg.Node.StateDir) {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
}

func (h *harness) setSourcesReady() {
	h.t.Helper()
	if _, err := h.sources.Put(h.ctx, bus.BucketSources, bus.KeySourcesReady,
		&schemas.SourcesReady{Configured: []string{"file"}, Ready: []string{"file"}, AllReady: true}); err != nil {
		h.t.Fatal(err)
	}
}

// desire puts pod in the desired bucket (as sources would).
func (h *harness) desire(pod *corev1.Pod) {
	h.t.Helper()
	if _, err := h.sources.Put(h.ctx, bus.BucketDesired, string(pod.UID),
		&schemas.PodDesired{Pod: pod, Source: schemas.SourceFile, FirstSeen: time.Now().UTC()}); err != nil {
		h.t.Fatal(err)
	}
}

// admit puts a verdict for pod (as admission would).
func (h *harness) admit(pod *corev1.Pod, ok bool) {
	h.t.Helper()
	v := &schemas.AdmissionVerdict{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Admitted: ok, DecidedAt: time.Now().UTC()}
	if !ok {
		v.Reason, v.Message = "OutOfcpu", "Node didn't have enough resource: cpu"
	}
	if _, err := h.admission.Put(h.ctx, bus.BucketAdmission, string(pod.UID), v); err != nil {
		h.t.Fatal(err)
	}
}

// run desires and admits pod.
func (h *harness) run(pod *corev1.Pod) {
	h.t.Helper()
	h.desire(pod)
	h.admit(pod, true)
}

// remove deletes pod from the desired bucket (and its verdict).
func (h *harness) remove(pod *corev1.Pod) {
	h.t.Helper()
	if err := h.sources.Delete(h.ctx, bus.BucketDesired, string(pod.UID)); err != nil {
		h.t.Fatal(err)
	}
	if err := h.admission.Delete(h.ctx, bus.BucketAdmission, string(pod.UID)); err != nil {
		h.t.Fatal(err)
	}
}

// sandboxes lists the CRI sandboxes of a pod.
func (h *harness) sandboxes(uid types.UID) []*runtimeapi.PodSandbox {
	h.t.Helper()
	resp, err := h.cri.Runtime.ListPodSandbox(h.ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Items
}

// containers lists the CRI containers of a pod.
func (h *harness) containers(uid types.UID) []*runtimeapi.Container {
	h.t.Helper()
	resp, err := h.cri.Runtime.ListContainers(h.ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Containers
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.State(t, timeout, what, cond)
}

// observedLog records every observed-state update the bus delivers.
type observedLog struct {
	mu     sync.Mutex
	resets int
	// epoch is, per key, the number of resets seen when it was last put.
	epoch   map[string]int
	latest  map[string]*schemas.PodObserved
	history map[string][]*schemas.PodObserved
	deleted map[string]bool
}

func watchObserved(t *testing.T, ctx context.Context, c *bus.Conn) *observedLog {
	o := &observedLog{epoch: map[string]int{}, latest: map[string]*schemas.PodObserved{}, history: map[string][]*schemas.PodObserved{}, deleted: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = bus.Watch(ctx, c, bus.BucketObserved, ">", func(u bus.Update[schemas.PodObserved]) {
			o.mu.Lock()
			defer o.mu.Unlock()
			switch u.Kind {
			case bus.Put:
				o.latest[u.Key] = u.Value
				o.epoch[u.Key] = o.resets
				o.history[u.Key] = append(o.history[u.Key], u.Value)
				o.deleted[u.Key] = false
			case bus.Deleted:
				delete(o.latest, u.Key)
				o.deleted[u.Key] = true
			case bus.Reset:
				o.latest = map[string]*schemas.PodObserved{}
				o.resets++
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

func (o *observedLog) get(uid types.UID) *schemas.PodObserved {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.latest[string(uid)]
}

// putSinceReset: the key was written after the n-th reset of the bucket.
func (o *observedLog) putSinceReset(uid types.UID, n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.latest[string(uid)]
	return ok && o.resets >= n && o.epoch[string(uid)] >= n
}

func (o *observedLog) wasDeleted(uid types.UID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.deleted[string(uid)]
}

func (o *observedLog) all(uid types.UID) []*schemas.PodObserved {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*schemas.PodObserved(nil), o.history[string(uid)]...)
}

// waitObserved waits until the pod's observed state satisfies cond.
func (h *harness) waitObserved(pod *corev1.Pod, timeout time.Duration, what string, cond func(*schemas.PodObserved) bool) *schemas.PodObserved {
	h.t.Helper()
	var got *schemas.PodObserved
	waitFor(h.t, timeout, what+" of pod "+pod.Name, func() (bool, string) {
		got = h.obs.get(pod.UID)
		if got == nil {
			return false, "no observed state"
		}
		return cond(got), describe(got)
	})
	return got
}

// waitSeen waits until some observed state the pod has had satisfies
// cond: for a passing state (ErrImagePull lasts only until the next pass
// shows the back-off) that polling the latest state may miss.
func (h *harness) waitSeen(pod *corev1.Pod, timeout time.Duration, what string, cond func(*schemas.PodObserved) bool) *schemas.PodObserved {
	h.t.Helper()
	var got *schemas.PodObserved
	waitFor(h.t, timeout, what+" of pod "+pod.Name, func() (bool, string) {
		hist := h.obs.all(pod.UID)
		for _, o := range hist {
			if cond(o) {
				got = o
				return true, ""
			}
		}
		if len(hist) == 0 {
			return false, "no observed state"
		}
		return false, describe(hist[len(hist)-1])
	})
	return got
}

// describe is a one-line summary of an observed state for failures.
func describe(o *schemas.PodObserved) string {
	s := fmt.Sprintf("gen=%d reason=%q msg=%q terminating=%v terminated=%v", o.Generation, o.Reason, o.Message, o.Terminating, o.Terminated)
	if o.Sandbox != nil {
		s += fmt.Sprintf(" sandbox=%.12s ready=%v ips=%v", o.Sandbox.ID, o.Sandbox.Ready, o.Sandbox.IPs)
	}
	for _, list := range [][]schemas.ContainerObserved{o.InitContainers, o.Containers, o.EphemeralContainers} {
		for _, c := range list {
			s += fmt.Sprintf(" [%s %s restarts=%d %s]", c.Kind, c.Name, c.RestartCount, stateString(c.State))
		}
	}
	return s
}

func stateString(st corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		return fmt.Sprintf("terminated(%d %s %q)", st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.Message)
	case st.Waiting != nil:
		return fmt.Sprintf("waiting(%s %q)", st.Waiting.Reason, st.Waiting.Message)
	}
	return "none"
}

func container(o *schemas.PodObserved, name string) *schemas.ContainerObserved {
	for _, list := range [][]schemas.ContainerObserved{o.InitContainers, o.Containers, o.EphemeralContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func running(o *schemas.PodObserved, names ...string) bool {
	for _, n := range names {
		c := container(o, n)
		if c == nil || c.State.Running == nil {
			return false
		}
	}
	return true
}

// newPod is a pod as sources deliver it: API defaults applied.
func newPod(name string, containers ...corev1.Container) *corev1.Pod {
	grace := int64(30)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uuid.NewString()), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers:                    containers,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			NodeName:                      "node-1",
			ServiceAccountName:            "default",
		},
	}
}

// busybox is a container of the local busybox image running sh -c script.
func busybox(name, script string) corev1.Container {
	return corev1.Container{
		Name:                     name,
		Image:                    images.BusyboxImage,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  []string{"sh", "-c", script},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

// httpGet fetches url from the host until it answers 200 or timeout.
func httpGet(t *testing.T, url string, timeout time.Duration) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// eventLog records the runtime's events as the tap sees them.
type eventLog struct {
	mu     sync.Mutex
	events []schemas.Event
}

func recordEvents(t *testing.T, tap *bus.Conn) *eventLog {
	l := &eventLog{}
	bustest.OnEvents(t, tap, bus.EventSubject(bus.Runtime, "*"), func(ev schemas.Event) {
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.mu.Unlock()
	})
	return l
}

// find returns the events about pod with reason.
func (l *eventLog) find(uid types.UID, reason string) []schemas.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []schemas.Event
	for _, e := range l.events {
		if e.Object.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// await waits until pod has at least n events with reason and returns them.
// An event travels the events stream, apart from the observed state, so it
// may arrive after the state that a test has just seen.
func (l *eventLog) await(t *testing.T, uid types.UID, reason string, n int) []schemas.Event {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d %s event(s)", n, reason), func() (bool, string) {
		return len(l.find(uid, reason)) >= n, strings.Join(l.reasons(uid), ",")
	})
	return l.find(uid, reason)
}

func (l *eventLog) reasons(uid types.UID) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		if e.Object.UID == uid {
			out = append(out, e.Reason)
		}
	}
	return out
}
