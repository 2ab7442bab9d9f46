package prober

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/podutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// One private containerd serves every test of the binary that needs one;
// TestMain stops it.
var (
	sharedOnce sync.Once
	shared     *testenv.Containerd
	sharedErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(benchServerEnv) != "" {
		benchServerMain()
	}
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

func containerd(t *testing.T) *testenv.Containerd {
	t.Helper()
	testenv.RequiresRoot(t)
	sharedOnce.Do(func() { shared, sharedErr = testenv.StartContainerd(testenv.ContainerdOptions{}) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// criPod is a pod the test runs through CRI itself, playing nodelet-runtime.
type criPod struct {
	t        *testing.T
	cri      *testenv.CRI
	pod      *corev1.Pod
	sandbox  string
	ip       string
	sbConfig *runtimeapi.PodSandboxConfig
	created  time.Time
	// containers by name: the current ContainerObserved.
	mu         sync.Mutex
	containers map[string]schemas.ContainerObserved
}

func criCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runPod starts a sandbox for pod (UID and name made unique by the
// caller) and returns it; containers are started with start.
func runPod(t *testing.T, c *testenv.CRI, pod *corev1.Pod) *criPod {
	t.Helper()
	ctx := criCtx(t)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)},
		Hostname:     pod.Name,
		LogDirectory: t.TempDir(),
		Labels: map[string]string{
			"io.kubernetes.pod.name":      pod.Name,
			"io.kubernetes.pod.namespace": pod.Namespace,
			"io.kubernetes.pod.uid":       string(pod.UID),
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
		}},
	}
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		_, _ = c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	})
	st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	return &criPod{t: t, cri: c, pod: pod, sandbox: sb.PodSandboxId, ip: st.GetStatus().GetNetwork().GetIp(), sbConfig: cfg,
		created: time.Unix(0, st.GetStatus().GetCreatedAt()), containers: map[string]schemas.ContainerObserved{}}
}

// start creates and starts (attempt) of the spec container name, with
// extra mounts, and records it as running.
func (p *criPod) start(name string, attempt uint32, mounts ...*runtimeapi.Mount) string {
	p.t.Helper()
	var spec *corev1.Container
	for _, c := range probeContainers(p.pod) {
		if c.Name == name {
			spec = c
		}
	}
	if spec == nil {
		p.t.Fatalf("no container %s in the pod", name)
	}
	ctx := criCtx(p.t)
	ctr, err := p.cri.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.sandbox,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
			Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage},
			Command:  spec.Command,
			Args:     spec.Args,
			LogPath:  fmt.Sprintf("%s_%d.log", name, attempt),
			Mounts:   mounts,
			Labels: map[string]string{
				"io.kubernetes.container.name": name,
				"io.kubernetes.pod.uid":        string(p.pod.UID),
			},
		},
		SandboxConfig: p.sbConfig,
	})
	if err != nil {
		p.t.Fatalf("CreateContainer %s: %v", name, err)
	}
	if _, err := p.cri.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		p.t.Fatalf("StartContainer %s: %v", name, err)
	}
	st, err := p.cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ContainerId})
	if err != nil {
		p.t.Fatalf("ContainerStatus %s: %v", name, err)
	}
	kind := schemas.ContainerKindApp
	if podutil.IsRestartableInit(spec) {
		kind = schemas.ContainerKindSidecar
	}
	p.mu.Lock()
	p.containers[name] = schemas.ContainerObserved{
		Name: name, Kind: kind, ContainerID: "containerd://" + ctr.ContainerId, Image: images.BusyboxImage,
		RestartCount: int32(attempt),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{
			StartedAt: metav1.NewTime(time.Unix(0, st.GetStatus().GetStartedAt()))}},
	}
	p.mu.Unlock()
	return ctr.ContainerId
}

// kill stops a container (as the runtime does after a liveness failure)
// and records it as terminated.
func (p *criPod) kill(name string) {
	p.t.Helper()
	p.mu.Lock()
	c := p.containers[name]
	p.mu.Unlock()
	id := rawContainerID(c.ContainerID)
	ctx := criCtx(p.t)
	if _, err := p.cri.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		p.t.Fatalf("StopContainer: %v", err)
	}
	st, err := p.cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		p.t.Fatalf("ContainerStatus: %v", err)
	}
	c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: st.GetStatus().GetExitCode(),
		ContainerID: c.ContainerID, Reason: st.GetStatus().GetReason()}}
	p.mu.Lock()
	p.containers[name] = c
	p.mu.Unlock()
}

// observed is what nodelet-runtime would publish for the pod now.
func (p *criPod) observed(generation uint64) *schemas.PodObserved {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := &schemas.PodObserved{UID: string(p.pod.UID), Namespace: p.pod.Namespace, Name: p.pod.Name, Generation: generation,
		Sandbox: &schemas.SandboxObserved{ID: p.sandbox, Ready: true, IPs: []string{p.ip}, CreatedAt: p.created}}
	for _, c := range p.pod.Spec.InitContainers {
		if oc, ok := p.containers[c.Name]; ok {
			o.InitContainers = append(o.InitContainers, oc)
		}
	}
	for _, c := range p.pod.Spec.Containers {
		if oc, ok := p.containers[c.Name]; ok {
			o.Containers = append(o.Containers, oc)
		}
	}
	return o
}

func (p *criPod) containerID(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.containers[name].ContainerID
}

// exec runs a shell command in a container (the test changing what the
// probes will see).
func (p *criPod) exec(name, script string) {
	p.t.Helper()
	resp, err := p.cri.Runtime.ExecSync(criCtx(p.t), &runtimeapi.ExecSyncRequest{
		ContainerId: rawContainerID(p.containerID(name)), Cmd: []string{"sh", "-c", script}, Timeout: 10})
	if err != nil || resp.ExitCode != 0 {
		p.t.Fatalf("exec %q in %s: %v (exit %d, %s)", script, name, err, resp.GetExitCode(), resp.GetStderr())
	}
}

// criPodSpec is a pod with unique name and UID for the test.
func criPodSpec(t *testing.T, containers ...corev1.Container) *corev1.Pod {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: containers, RestartPolicy: corev1.RestartPolicyAlways},
	}
}

// proberOptions connects a prober to the test containerd.
func proberOptions(t *testing.T, c *testenv.Containerd) Options {
	t.Helper()
	clients, err := cri.Connect(criCtx(t), c.Endpoint, "", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Runtime: clients.Runtime}
}

// waitCount waits until the probe counter of (uid, container, kind,
// result) reaches n, and returns it.
func waitCount(t *testing.T, uid, container, kind, result string, n float64, timeout time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := probeCount(t, uid, container, kind, result)
		if v >= n {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s probe of %s: %v %s probes in %v, want %v", uid, kind, container, v, result, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
