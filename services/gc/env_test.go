package gc

import (
	"slices"

	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// testEnv is a node for one test: a private containerd with the pause and
// busybox images, a bus, and connections as the components whose state gc
// reads. Pods are made through CRI the way nodelet-runtime makes them.
type testEnv struct {
	t       *testing.T
	ctr     *testenv.Containerd
	cri     *cri.Clients
	bus     *bustest.Bus
	sources *bus.Conn
	runtime *bus.Conn
	cfg     *config.Config
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	ctr := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	clients, err := cri.Connect(testCtx(t), ctr.Endpoint, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b := bustest.Start(t)
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = t.TempDir()
	cfg.Runtime.Endpoint = ctr.Endpoint
	cfg.Bus.Listen = "127.0.0.1:1" // unused: tests connect through bustest
	return &testEnv{t: t, ctr: ctr, cri: clients, bus: b,
		sources: b.Connect(bus.Sources), runtime: b.Connect(bus.Runtime), cfg: cfg}
}

// newGC builds a GC on the env's config and runs its state watch; it
// returns once the watch has loaded every bucket.
func (e *testEnv) newGC(opts ...func(*Options)) (*Daemon, context.CancelFunc) {
	e.t.Helper()
	o := Options{
		Deps:    daemon.Deps{Config: e.cfg, Log: bustest.Logger().With("component", "gc"), Bus: e.bus.Connect(bus.GC)},
		Runtime: e.cri.Runtime,
		Images:  e.cri.Image,
	}
	for _, f := range opts {
		f(&o)
	}
	g, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.state.run(ctx, g.bus); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	waitFor(e.t, "gc to load the buckets", g.state.synced)
	return g, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, time.Minute, what, cond)
}

// testPod is one pod made through CRI.
type testPod struct {
	pod       *corev1.Pod
	sandboxID string
	sbConfig  *runtimeapi.PodSandboxConfig
	logDir    string
}

func newPod(name string, containers ...corev1.Container) *corev1.Pod {
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID(uid),
			Annotations: map[string]string{"kubernetes.io/config.source": schemas.SourceAPI}},
		Spec: corev1.PodSpec{Containers: containers, RestartPolicy: corev1.RestartPolicyAlways},
	}
}

// runSandbox starts the pod's sandbox with nodelet-runtime's labels and
// log directory.
func (e *testEnv) runSandbox(pod *corev1.Pod, attempt uint32) *testPod {
	e.t.Helper()
	uid := string(pod.UID)
	logDir := podLogDir(e.cfg.Node.PodLogsDir, pod.Namespace, pod.Name, uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: uid, Attempt: attempt},
		LogDirectory: logDir,
		Labels: map[string]string{cri.LabelPodName: pod.Name, cri.LabelPodNamespace: pod.Namespace,
			cri.LabelPodUID: uid, cri.LabelManaged: "true"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
	}
	id, err := e.cri.Runtime.RunPodSandbox(testCtx(e.t), sbConfig, "")
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v", pod.Name, err)
	}
	return &testPod{pod: pod, sandboxID: id, sbConfig: sbConfig, logDir: logDir}
}

// startContainer creates and starts instance attempt of container name,
// logging to <logDir>/<name>/<attempt>.log as the kubelet does.
func (e *testEnv) startContainer(p *testPod, name string, attempt uint32, cmd ...string) string {
	e.t.Helper()
	ctx := testCtx(e.t)
	if err := os.MkdirAll(filepath.Join(p.logDir, name), 0o755); err != nil {
		e.t.Fatal(err)
	}
	uid := string(p.pod.UID)
	id, err := e.cri.Runtime.CreateContainer(ctx, p.sandboxID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage},
		Command:  cmd,
		LogPath:  filepath.Join(name, strconv.Itoa(int(attempt))+".log"),
		Labels: map[string]string{cri.LabelPodName: p.pod.Name, cri.LabelPodNamespace: p.pod.Namespace,
			cri.LabelPodUID: uid, cri.LabelContainerName: name, cri.LabelManaged: "true"},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": strconv.Itoa(int(attempt))},
	}, p.sbConfig)
	if err != nil {
		e.t.Fatalf("CreateContainer %s/%s#%d: %v", p.pod.Name, name, attempt, err)
	}
	if err := e.cri.Runtime.StartContainer(ctx, id); err != nil {
		e.t.Fatalf("StartContainer %s/%s#%d: %v", p.pod.Name, name, attempt, err)
	}
	return id
}

// crash runs instance attempt of a container that exits at once, and waits
// until it has.
func (e *testEnv) crash(p *testPod, name string, attempt uint32) string {
	e.t.Helper()
	id := e.startContainer(p, name, attempt, "sh", "-c", "echo crashing; exit 1")
	waitFor(e.t, "container "+name+" to exit", func() bool {
		st, err := e.cri.Runtime.ContainerStatus(testCtx(e.t), id, false)
		return err == nil && st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	return id
}

// stopPod stops every container and the sandbox, as the runtime does when
// a pod ends.
func (e *testEnv) stopPod(p *testPod) {
	e.t.Helper()
	ctx := testCtx(e.t)
	cs, err := e.cri.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: p.sandboxID})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cs {
		if err := e.cri.Runtime.StopContainer(ctx, c.Id, 0); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.cri.Runtime.StopPodSandbox(ctx, p.sandboxID); err != nil {
		e.t.Fatal(err)
	}
}

// containersOf lists the pod's containers, any state.
func (e *testEnv) containersOf(uid string) []*runtimeapi.Container {
	e.t.Helper()
	cs, err := e.cri.Runtime.ListContainers(testCtx(e.t), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{cri.LabelPodUID: uid}})
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func (e *testEnv) sandboxesOf(uid string) []*runtimeapi.PodSandbox {
	e.t.Helper()
	sbs, err := e.cri.Runtime.ListPodSandbox(testCtx(e.t), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{cri.LabelPodUID: uid}})
	if err != nil {
		e.t.Fatal(err)
	}
	return sbs
}

// desire publishes the pod as nodelet-sources does.
func (e *testEnv) desire(pod *corev1.Pod) {
	e.t.Helper()
	if _, err := e.sources.Put(testCtx(e.t), bus.BucketDesired, string(pod.UID),
		&schemas.PodDesired{Pod: pod, Source: schemas.SourceAPI, FirstSeen: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) undesire(pod *corev1.Pod) {
	e.t.Helper()
	if err := e.sources.Delete(testCtx(e.t), bus.BucketDesired, string(pod.UID)); err != nil {
		e.t.Fatal(err)
	}
}

// observe publishes the pod's observed state as nodelet-runtime does.
func (e *testEnv) observe(pod *corev1.Pod, terminated bool) {
	e.t.Helper()
	if _, err := e.runtime.Put(testCtx(e.t), bus.BucketObserved, string(pod.UID),
		&schemas.PodObserved{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Terminated: terminated}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) unobserve(pod *corev1.Pod) {
	e.t.Helper()
	if err := e.runtime.Delete(testCtx(e.t), bus.BucketObserved, string(pod.UID)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) sourcesReady(ready bool) {
	e.t.Helper()
	if _, err := e.sources.Put(testCtx(e.t), bus.BucketSources, bus.KeySourcesReady,
		&schemas.SourcesReady{Configured: []string{"api"}, Ready: []string{"api"}, AllReady: ready}); err != nil {
		e.t.Fatal(err)
	}
}

// importImage builds a tiny single-layer image tagged ref and imports it
// into the env's containerd; it returns the image ID.
func (e *testEnv) importImage(ref string) string {
	e.t.Helper()
	layer, err := random.Layer(4096, types.DockerLayer)
	if err != nil {
		e.t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		e.t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		e.t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Cmd: []string{"/bin/true"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		e.t.Fatal(err)
	}
	tar, err := images.Write(img, ref, filepath.Join(e.t.TempDir(), "image.tar"))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := images.Import(testCtx(e.t), e.ctr.Address, "k8s.io", tar.Path); err != nil {
		e.t.Fatal(err)
	}
	return tar.ID.String()
}

// imageIDs lists the runtime's image IDs.
func (e *testEnv) imageIDs() map[string]bool {
	e.t.Helper()
	imgs, err := e.cri.Image.ListImages(testCtx(e.t), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, i := range imgs {
		out[i.Id] = true
	}
	return out
}

// eventLog collects the events gc emits, through a tap subscription.
type eventLog struct {
	mu     sync.Mutex
	events []schemas.Event
}

func subscribeEvents(t *testing.T, b *bustest.Bus) *eventLog {
	t.Helper()
	l := &eventLog{}
	bustest.OnEvents(t, b.Connect(bus.Tap), bus.SubjectEventsAll, func(ev schemas.Event) {
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.mu.Unlock()
	})
	return l
}

// wait returns the first event with reason, waiting for it.
func (l *eventLog) wait(t *testing.T, reason string) schemas.Event {
	t.Helper()
	var found *schemas.Event
	waitFor(t, "event "+reason, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := range l.events {
			if l.events[i].Reason == reason {
				found = &l.events[i]
				return true
			}
		}
		return false
	})
	return *found
}

func (l *eventLog) reasons() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		out = append(out, ev.Reason)
	}
	return out
}

// fakeMeasurer returns fixed figures; nil funcs fall back to real. It
// records what each PodUsage call asked for.
type fakeMeasurer struct {
	real Measurer
	node func(*NodeStats)
	pods map[string]*PodUsage

	mu    sync.Mutex
	asked []usageCall
}

// usageCall is one PodUsage call: the pods' names, and whether process
// counts were wanted.
type usageCall struct {
	pods      []string
	processes bool
}

func (f *fakeMeasurer) calls() []usageCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

func (f *fakeMeasurer) NodeStats(ctx context.Context) (*NodeStats, error) {
	ns := &NodeStats{Time: time.Now()}
	if f.real != nil {
		var err error
		if ns, err = f.real.NodeStats(ctx); ns == nil {
			return nil, err
		}
	}
	if f.node != nil {
		f.node(ns)
	}
	return ns, nil
}

func (f *fakeMeasurer) PodUsage(ctx context.Context, pods []*corev1.Pod, processes bool) (map[string]*PodUsage, error) {
	c := usageCall{processes: processes}
	for _, p := range pods {
		c.pods = append(c.pods, p.Name)
	}
	f.mu.Lock()
	f.asked = append(f.asked, c)
	f.mu.Unlock()
	if f.pods != nil {
		return f.pods, nil
	}
	if f.real != nil {
		return f.real.PodUsage(ctx, pods, processes)
	}
	return map[string]*PodUsage{}, nil
}

// counterValue reads a counter or gauge.
func counterValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// newUnitEnv is a real bus with a config, a fake clock and fake
// measurements, for unit tests of gc's decisions.
func newUnitEnv(t *testing.T) (*bustest.Bus, *config.Config, *clocktesting.FakeClock, *fakeMeasurer) {
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = t.TempDir()
	return bustest.Start(t), cfg, clocktesting.NewFakeClock(time.Now()), &fakeMeasurer{}
}

// newUnitGC builds a GC over the cri-api fake runtime and runs its state
// watch until the test ends.
func newUnitGC(t *testing.T, b *bustest.Bus, cfg *config.Config, clk *clocktesting.FakeClock, m Measurer) *Daemon {
	t.Helper()
	g, err := New(Options{
		Deps:     daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: b.Connect(bus.GC)},
		Clock:    clk,
		Measurer: m,
		Runtime:  critest.NewFakeRuntimeService(),
		Images:   critest.NewFakeImageService(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.state.run(ctx, g.bus); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "gc to load the buckets", g.state.synced)
	return g
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
