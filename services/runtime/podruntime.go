package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	crierrors "k8s.io/cri-api/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandboxInfo is one pod sandbox as CRI reports it.
type sandboxInfo struct {
	ID          string
	Attempt     uint32
	Ready       bool
	CreatedAt   time.Time
	IPs         []string
	HostNetwork bool
	Labels      map[string]string
	Annotations map[string]string
}

// containerInfo is one container as CRI reports it, with what nodelet
// wrote into its labels and annotations.
type containerInfo struct {
	ID         string
	Name       string
	SandboxID  string
	State      runtimeapi.ContainerState
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int32
	Reason     string
	// Message is CRI's message plus the termination message.
	Message  string
	Image    string
	ImageRef string

	Hash                     string
	RestartCount             int
	Kind                     string
	TerminationMessagePath   string
	TerminationMessagePolicy corev1.TerminationMessagePolicy
	DeletionGracePeriod      *int64
	TerminationGracePeriod   *int64
	PreStop                  *corev1.LifecycleHandler
	Ports                    []corev1.ContainerPort
	LogPath                  string
}

func (c *containerInfo) running() bool { return c.State == runtimeapi.ContainerState_CONTAINER_RUNNING }
func (c *containerInfo) exited() bool  { return c.State == runtimeapi.ContainerState_CONTAINER_EXITED }
func (c *containerInfo) created() bool { return c.State == runtimeapi.ContainerState_CONTAINER_CREATED }

// podRuntime is everything CRI has of one pod UID: its sandboxes and
// containers, newest first.
type podRuntime struct {
	UID        string
	Name       string
	Namespace  string
	Sandboxes  []*sandboxInfo
	Containers []*containerInfo
}

func (p *podRuntime) empty() bool { return p == nil || len(p.Sandboxes) == 0 && len(p.Containers) == 0 }

// newestSandbox is the pod's current sandbox, nil without one.
func (p *podRuntime) newestSandbox() *sandboxInfo {
	if p == nil || len(p.Sandboxes) == 0 {
		return nil
	}
	return p.Sandboxes[0]
}

// newest is the newest container named name, nil without one.
func (p *podRuntime) newest(name string) *containerInfo {
	if p == nil {
		return nil
	}
	for _, c := range p.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// previous is the newest container named name older than c.
func (p *podRuntime) previous(c *containerInfo) *containerInfo {
	seen := false
	for _, x := range p.Containers {
		if x == c {
			seen = true
			continue
		}
		if seen && x.Name == c.Name {
			return x
		}
	}
	return nil
}

// active lists the containers that are running or created.
func (p *podRuntime) active() []*containerInfo {
	var out []*containerInfo
	if p == nil {
		return nil
	}
	for _, c := range p.Containers {
		if !c.exited() {
			out = append(out, c)
		}
	}
	return out
}

// criView reads pods from CRI. Statuses of containers and sandboxes are
// cached while their listed state stays the same (a running container's
// start time, an exited one's exit code never change), so a relist costs
// two list calls plus one status call per state change.
type criView struct {
	rs internalapi.RuntimeService

	mu         sync.Mutex
	containers map[string]*containerInfo
	sandboxes  map[string]*sandboxInfo
}

func newCRIView(rs internalapi.RuntimeService) *criView {
	return &criView{rs: rs, containers: map[string]*containerInfo{}, sandboxes: map[string]*sandboxInfo{}}
}

// pod reads one pod's sandboxes and containers.
func (v *criView) pod(ctx context.Context, uid string) (*podRuntime, error) {
	sel := map[string]string{labelPodUID: uid, LabelManaged: "true"}
	sbs, err := v.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of pod %s: %w", uid, err)
	}
	cs, err := v.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s: %w", uid, err)
	}
	pods, err := v.build(ctx, sbs, cs, false)
	if err != nil {
		return nil, err
	}
	if p := pods[uid]; p != nil {
		return p, nil
	}
	return &podRuntime{UID: uid}, nil
}

// all reads every nodelet pod, and forgets cached statuses of sandboxes and
// containers that are gone.
func (v *criView) all(ctx context.Context) (map[string]*podRuntime, error) {
	sbs, err := v.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: managedFilter})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	cs, err := v.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: managedFilter})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	return v.build(ctx, sbs, cs, true)
}

func (v *criView) build(ctx context.Context, sbs []*runtimeapi.PodSandbox, cs []*runtimeapi.Container, prune bool) (map[string]*podRuntime, error) {
	pods := map[string]*podRuntime{}
	get := func(labels map[string]string) *podRuntime {
		uid := labels[labelPodUID]
		p := pods[uid]
		if p == nil {
			p = &podRuntime{UID: uid, Name: labels[labelPodName], Namespace: labels[labelPodNamespace]}
			pods[uid] = p
		}
		return p
	}
	seen := map[string]bool{}
	for _, sb := range sbs {
		if sb.Labels[labelPodUID] == "" {
			continue
		}
		seen[sb.Id] = true
		info, err := v.sandboxStatus(ctx, sb)
		if err != nil {
			if crierrors.IsNotFound(err) {
				continue // removed meanwhile
			}
			return nil, err
		}
		p := get(sb.Labels)
		p.Sandboxes = append(p.Sandboxes, info)
	}
	for _, c := range cs {
		if c.Labels[labelPodUID] == "" {
			continue
		}
		seen[c.Id] = true
		info, err := v.containerStatus(ctx, c)
		if err != nil {
			if crierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		p := get(c.Labels)
		p.Containers = append(p.Containers, info)
	}
	for _, p := range pods {
		sort.SliceStable(p.Sandboxes, func(i, j int) bool {
			a, b := p.Sandboxes[i], p.Sandboxes[j]
			if a.Attempt != b.Attempt {
				return a.Attempt > b.Attempt
			}
			return a.CreatedAt.After(b.CreatedAt)
		})
		sort.SliceStable(p.Containers, func(i, j int) bool {
			return p.Containers[i].CreatedAt.After(p.Containers[j].CreatedAt)
		})
	}
	if prune {
		v.mu.Lock()
		for id := range v.containers {
			if !seen[id] {
				delete(v.containers, id)
			}
		}
		for id := range v.sandboxes {
			if !seen[id] {
				delete(v.sandboxes, id)
			}
		}
		v.mu.Unlock()
	}
	return pods, nil
}

func (v *criView) sandboxStatus(ctx context.Context, sb *runtimeapi.PodSandbox) (*sandboxInfo, error) {
	ready := sb.State == runtimeapi.PodSandboxState_SANDBOX_READY
	v.mu.Lock()
	cached := v.sandboxes[sb.Id]
	v.mu.Unlock()
	if cached != nil && cached.Ready == ready {
		return cached, nil
	}
	resp, err := v.rs.PodSandboxStatus(ctx, sb.Id, false)
	if err != nil {
		return nil, fmt.Errorf("status of sandbox %s: %w", sb.Id, err)
	}
	return v.keepSandbox(sb.Id, sb.GetMetadata().GetAttempt(), sb.Labels, sb.Annotations, resp.GetStatus()), nil
}

// keepSandbox caches and returns a sandbox's info from its status.
func (v *criView) keepSandbox(id string, attempt uint32, labels, annotations map[string]string, st *runtimeapi.PodSandboxStatus) *sandboxInfo {
	info := &sandboxInfo{
		ID:          id,
		Attempt:     attempt,
		Ready:       st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt:   nanoTime(st.GetCreatedAt()),
		Labels:      labels,
		Annotations: annotations,
		HostNetwork: st.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
	}
	if ip := st.GetNetwork().GetIp(); ip != "" {
		info.IPs = append(info.IPs, ip)
	}
	for _, ip := range st.GetNetwork().GetAdditionalIps() {
		info.IPs = append(info.IPs, ip.GetIp())
	}
	v.mu.Lock()
	v.sandboxes[id] = info
	v.mu.Unlock()
	return info
}

// withSandbox is pr with the sandbox id its worker just created, from one
// PodSandboxStatus call rather than a relist of the pod (two list calls
// and the statuses): the worker is the pod's only writer, so nothing else
// of it changed meanwhile. The new sandbox is the newest.
func (v *criView) withSandbox(ctx context.Context, pr *podRuntime, id string) (*podRuntime, error) {
	resp, err := v.rs.PodSandboxStatus(ctx, id, false)
	if err != nil {
		return nil, fmt.Errorf("status of sandbox %s: %w", id, err)
	}
	st := resp.GetStatus()
	info := v.keepSandbox(id, st.GetMetadata().GetAttempt(), st.GetLabels(), st.GetAnnotations(), st)
	out := &podRuntime{UID: pr.UID, Name: pr.Name, Namespace: pr.Namespace, Containers: pr.Containers,
		Sandboxes: append([]*sandboxInfo{info}, pr.Sandboxes...)}
	if out.Name == "" {
		out.Name, out.Namespace = info.Labels[labelPodName], info.Labels[labelPodNamespace]
	}
	return out, nil
}

func (v *criView) containerStatus(ctx context.Context, c *runtimeapi.Container) (*containerInfo, error) {
	v.mu.Lock()
	cached := v.containers[c.Id]
	v.mu.Unlock()
	if cached != nil && cached.State == c.State {
		return cached, nil
	}
	resp, err := v.rs.ContainerStatus(ctx, c.Id, false)
	if err != nil {
		return nil, fmt.Errorf("status of container %s: %w", c.Id, err)
	}
	st := resp.GetStatus()
	if st == nil {
		return nil, fmt.Errorf("status of container %s: empty answer", c.Id)
	}
	return v.keepContainer(c, st), nil
}

// withStarted is pr with the containers its worker just created or
// started in sandbox (ids), each from its own ContainerStatus call rather
// than a relist of the pod: the worker is the pod's only writer.
func (v *criView) withStarted(ctx context.Context, pr *podRuntime, sandbox string, ids []string) (*podRuntime, error) {
	out := *pr
	out.Containers = slices.Clone(pr.Containers)
	for _, id := range ids {
		resp, err := v.rs.ContainerStatus(ctx, id, false)
		if err != nil {
			return nil, fmt.Errorf("status of container %s: %w", id, err)
		}
		st := resp.GetStatus()
		if st == nil {
			return nil, fmt.Errorf("status of container %s: empty answer", id)
		}
		info := v.keepContainer(&runtimeapi.Container{Id: id, PodSandboxId: sandbox, Labels: st.Labels, Annotations: st.Annotations}, st)
		out.Containers = slices.DeleteFunc(out.Containers, func(c *containerInfo) bool { return c.ID == id })
		out.Containers = append(out.Containers, info)
	}
	sort.SliceStable(out.Containers, func(i, j int) bool {
		return out.Containers[i].CreatedAt.After(out.Containers[j].CreatedAt)
	})
	return &out, nil
}

// keepContainer caches and returns a container's info from its listing
// and its status.
func (v *criView) keepContainer(c *runtimeapi.Container, st *runtimeapi.ContainerStatus) *containerInfo {
	a := st.Annotations
	if a == nil {
		a = c.Annotations
	}
	info := &containerInfo{
		ID:                       c.Id,
		Name:                     c.Labels[labelContainerName],
		SandboxID:                c.PodSandboxId,
		State:                    st.State,
		CreatedAt:                nanoTime(st.CreatedAt),
		StartedAt:                nanoTime(st.StartedAt),
		FinishedAt:               nanoTime(st.FinishedAt),
		ExitCode:                 st.ExitCode,
		Reason:                   st.Reason,
		Message:                  st.Message,
		Image:                    st.GetImage().GetImage(),
		ImageRef:                 st.ImageRef,
		Hash:                     a[annotationContainerHash],
		Kind:                     a[annotationContainerType],
		TerminationMessagePath:   a[annotationTerminationMessagePath],
		TerminationMessagePolicy: corev1.TerminationMessagePolicy(a[annotationTerminationMessagePolicy]),
		DeletionGracePeriod:      parseInt64(a[annotationPodDeletionGracePeriod]),
		TerminationGracePeriod:   parseInt64(a[annotationPodTerminationGracePeriod]),
		LogPath:                  st.LogPath,
	}
	if n, err := strconv.Atoi(a[annotationRestartCount]); err == nil {
		info.RestartCount = n
	}
	if s := a[annotationPreStopHandler]; s != "" {
		var h corev1.LifecycleHandler
		if json.Unmarshal([]byte(s), &h) == nil {
			info.PreStop = &h
		}
	}
	if s := a[annotationContainerPorts]; s != "" {
		_ = json.Unmarshal([]byte(s), &info.Ports)
	}
	if info.exited() {
		fallback := info.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError &&
			info.ExitCode != 0 && info.Reason != "ContainerCannotRun"
		msg := terminationMessage(st.Mounts, info.TerminationMessagePath)
		if msg == "" && fallback {
			msg = lastLogLines(st.LogPath)
		}
		if msg != "" {
			if info.Message != "" {
				info.Message += ": "
			}
			info.Message += msg
		}
	}
	v.mu.Lock()
	v.containers[c.Id] = info
	v.mu.Unlock()
	return info
}

// Limits of a termination message, the kubelet's.
const (
	maxTerminationMessageBytes = 4 * 1024
	maxLogTailLines            = 80
	maxLogTailBytes            = 2 * 1024
)

// terminationMessage reads the file mounted at path (the container's
// terminationMessagePath) from the host side.
func terminationMessage(mounts []*runtimeapi.Mount, path string) string {
	if path == "" {
		return ""
	}
	for _, m := range mounts {
		if m.ContainerPath != path {
			continue
		}
		f, err := os.Open(m.HostPath)
		if err != nil {
			return ""
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, maxTerminationMessageBytes))
		return string(b)
	}
	return ""
}

// lastLogLines returns the end of a CRI log file (at most 80 lines and 2 KiB),
// without the CRI timestamps and stream tags.
func lastLogLines(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLogTailLines {
		lines = lines[len(lines)-maxLogTailLines:]
	}
	var out bytes.Buffer
	for _, l := range lines {
		// <RFC3339Nano> <stdout|stderr> <P|F> <content>
		f := strings.SplitN(l, " ", 4)
		if len(f) == 4 {
			out.WriteString(f[3])
			if f[2] != "P" {
				out.WriteByte('\n')
			}
		} else {
			out.WriteString(l + "\n")
		}
	}
	s := out.String()
	if len(s) > maxLogTailBytes {
		s = s[len(s)-maxLogTailBytes:]
	}
	return s
}

func nanoTime(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
