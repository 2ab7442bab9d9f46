package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// In-place pod resize, the kubelet's allocation manager
// (handlePodResourcesResize), kuberuntime's doPodResizeAction and the
// status manager's resize conditions.
//
// A pod's allocated resources are what the node accepted for it: its spec
// when it was admitted, then each resize that fits. A resize that does not
// fit the node's allocatable resources beside the other pods' allocations
// stays pending (PodResizePending, reason Deferred, the kubelet's "Node
// didn't have enough resource: ..." message) and is tried again on every
// sync; one the node can never carry out is Infeasible. An accepted resize
// is PodResizeInProgress until the pod cgroup and every running
// container (UpdateContainerResources) have the new values. Allocated and
// applied resources are published in the pod's observed state, which
// nodelet-runtime reloads at start: a restart neither loses nor repeats a
// resize.

// resizeState holds each pod's allocation and resize progress.
type resizeState struct {
	mu   sync.Mutex
	pods map[string]*podResize
}

// podResize is one pod's: allocated resources by container name, what
// each running container was given (by container ID), and the two
// conditions.
type podResize struct {
	alloc      map[string]corev1.ResourceRequirements
	applied    map[string]appliedResources
	pending    *corev1.PodCondition
	inProgress *corev1.PodCondition
}

// allocOr is c's allocation, or its spec when it has none yet.
func (r *podResize) allocOr(c *corev1.Container) *corev1.ResourceRequirements {
	if a, ok := r.alloc[c.Name]; ok {
		return &a
	}
	return &c.Resources
}

type appliedResources struct {
	id  string
	res corev1.ResourceRequirements
}

// resizable are the containers whose resources a resize changes: app
// containers and sidecars (the kubelet's allocation covers init
// containers too; they only run before the pod does).
func resizable(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// podResizeOf returns the pod's resize state, made from its last observed
// state (after a restart) or its spec (a new pod).
func (p *podResources) podResizeOf(pod *corev1.Pod) *podResize {
	uid := string(pod.UID)
	p.resize.mu.Lock()
	defer p.resize.mu.Unlock()
	if p.resize.pods == nil {
		p.resize.pods = map[string]*podResize{}
	}
	if r := p.resize.pods[uid]; r != nil {
		return r
	}
	r := &podResize{alloc: map[string]corev1.ResourceRequirements{}, applied: map[string]appliedResources{}}
	prev := p.observed.get(uid)
	byName := map[string]schemas.ContainerObserved{}
	if prev != nil {
		for _, list := range [][]schemas.ContainerObserved{prev.InitContainers, prev.Containers} {
			for _, c := range list {
				byName[c.Name] = c
			}
		}
		for i := range prev.ResizeConditions {
			c := prev.ResizeConditions[i]
			switch c.Type {
			case corev1.PodResizePending:
				r.pending = &c
			case corev1.PodResizeInProgress:
				r.inProgress = &c
			}
		}
	}
	for _, c := range resizable(pod) {
		r.alloc[c.Name] = *c.Resources.DeepCopy()
		if o, ok := byName[c.Name]; ok {
			if o.Allocated != nil {
				r.alloc[c.Name] = *o.Allocated.DeepCopy()
			}
			if o.Resources != nil && o.ContainerID != "" {
				r.applied[c.Name] = appliedResources{id: rawID(o.ContainerID), res: *o.Resources.DeepCopy()}
			}
		}
	}
	p.resize.pods[uid] = r
	return r
}

func rawID(id string) string {
	if _, after, ok := strings.Cut(id, "://"); ok {
		return after
	}
	return id
}

// forgetResize drops a removed pod's resize state.
func (p *podResources) forgetResize(uid string) {
	p.resize.mu.Lock()
	delete(p.resize.pods, uid)
	p.resize.mu.Unlock()
}

// allocatedPod is pod with its allocated resources (the kubelet's
// UpdatePodFromAllocation): what its cgroups and new containers get.
func (p *podResources) allocatedPod(pod *corev1.Pod) *corev1.Pod {
	p.resize.mu.Lock()
	r := p.resize.pods[string(pod.UID)]
	var alloc map[string]corev1.ResourceRequirements
	if r != nil {
		alloc = r.alloc
	}
	p.resize.mu.Unlock()
	if alloc == nil {
		return pod
	}
	var out *corev1.Pod
	for i, c := range resizable(pod) {
		a, ok := alloc[c.Name]
		if !ok || equality.Semantic.DeepEqual(a, c.Resources) {
			continue
		}
		if out == nil {
			out = pod.DeepCopy()
		}
		if i < len(pod.Spec.InitContainers) {
			out.Spec.InitContainers[i].Resources = *a.DeepCopy()
		} else {
			out.Spec.Containers[i-len(pod.Spec.InitContainers)].Resources = *a.DeepCopy()
		}
	}
	if out == nil {
		return pod
	}
	return out
}

// noteRunning records, for each running container not seen yet, that it
// was started with the allocation as it is before any resize still to
// come. Callers hold p.resize.mu.
func (r *podResize) noteRunning(pod *corev1.Pod, pr *podRuntime) {
	for _, c := range resizable(pod) {
		info := pr.newest(c.Name)
		if info == nil || info.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if ap, ok := r.applied[c.Name]; !ok || ap.id != info.ID {
			r.applied[c.Name] = appliedResources{id: info.ID, res: *r.allocOr(c).DeepCopy()}
		}
	}
}

// noteStarted is noteRunning for the containers a sync pass just started,
// so the state it reports already says what they were given (else the
// next pass would publish the pod again only to add it).
func (p *podResources) noteStarted(pod *corev1.Pod, pr *podRuntime) {
	r := p.podResizeOf(pod)
	p.resize.mu.Lock()
	defer p.resize.mu.Unlock()
	r.noteRunning(pod, pr)
}

// admitResize decides a pending resize of a running pod (the kubelet's
// handlePodResourcesResize and its podResizesAdmitHandler) and returns the
// pod with its allocated resources.
func (p *podResources) admitResize(ctx context.Context, pod *corev1.Pod, pr *podRuntime) *corev1.Pod {
	r := p.podResizeOf(pod)
	p.resize.mu.Lock()
	r.noteRunning(pod, pr)
	changed := false
	for _, c := range resizable(pod) {
		if a, ok := r.alloc[c.Name]; !ok || !equality.Semantic.DeepEqual(a, c.Resources) {
			changed = true
		}
	}
	if !changed {
		r.pending = nil // reverted, or accepted
		p.resize.mu.Unlock()
		return p.allocatedPod(pod)
	}
	p.resize.mu.Unlock()

	reason, message := p.resizeFits(pod)
	p.resize.mu.Lock()
	if reason != "" {
		fresh := r.pending == nil || r.pending.Reason != reason || r.pending.ObservedGeneration != pod.Generation
		if fresh {
			r.pending = &corev1.PodCondition{
				Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: reason, Message: message,
				ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(p.clock.Now()),
			}
		}
		p.resize.mu.Unlock()
		if fresh {
			typ := "ResizeDeferred"
			if reason == corev1.PodReasonInfeasible {
				typ = "ResizeInfeasible"
			}
			p.log.Info("Pod resize pending", "pod", podRef(pod), "podUID", pod.UID, "reason", reason, "message", message)
			p.event(pod, nil, "", corev1.EventTypeWarning, typ, resizeMessage(pod, pod.Generation, message, "Pod resize "+reason))
		}
		return p.allocatedPod(pod)
	}
	for _, c := range resizable(pod) {
		r.alloc[c.Name] = *c.Resources.DeepCopy()
	}
	r.pending = nil
	r.inProgress = &corev1.PodCondition{
		Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue,
		ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(p.clock.Now()),
	}
	p.resize.mu.Unlock()
	p.log.Info("Pod resize started", "pod", podRef(pod), "podUID", pod.UID, "generation", pod.Generation)
	p.event(pod, nil, "", corev1.EventTypeNormal, "ResizeStarted", resizeMessage(pod, pod.Generation, "", "Pod resize started"))
	return p.allocatedPod(pod)
}

// resizeFits is the kubelet's canAdmitPod for a resize: "" when the
// resized pod fits the node's allocatable CPU and memory beside the
// other pods' allocations, else Deferred with the scheduler's
// InsufficientResourceError message, or Infeasible when it can never be
// carried out here.
func (p *podResources) resizeFits(pod *corev1.Pod) (reason, message string) {
	if p.cgroups.Manager() != nil && !p.cgroups.Manager().V2() && memoryBackedVolumeResize(pod, p.allocatedPod(pod)) {
		// The kubelet's disallowResizeForMemoryBackedVolumes.
		return corev1.PodReasonInfeasible, "Memory-backed emptyDir volume resize is not supported on cgroups v1"
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: p.capacity.CPU, corev1.ResourceMemory: p.capacity.Memory}
	allocatable, err := nodestatus.Allocatable(p.cfg, capacity)
	if err != nil {
		return corev1.PodReasonDeferred, err.Error()
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	used := corev1.ResourceList{}
	for _, uid := range p.store.uids() {
		if uid == string(pod.UID) {
			continue
		}
		rec := p.store.get(uid)
		if rec == nil || rec.Pod == nil || rec.Gone || rec.Verdict == nil || !rec.Verdict.Admitted {
			continue
		}
		if o := p.observed.get(uid); o != nil && o.Terminated {
			continue
		}
		if podutil.IsTerminalPhase(rec.Pod.Status.Phase) {
			continue // the kubelet's active pods leave terminal ones out
		}
		for k, v := range resourcehelper.PodRequests(p.allocatedPod(rec.Pod), resourcehelper.PodResourcesOptions{}) {
			q := used[k]
			q.Add(v)
			used[k] = q
		}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		w, u, c := want[name], used[name], allocatable[name]
		wv, uv, cv := w.Value(), u.Value(), c.Value()
		if name == corev1.ResourceCPU {
			wv, uv, cv = w.MilliValue(), u.MilliValue(), c.MilliValue()
		}
		if wv+uv > cv {
			return corev1.PodReasonDeferred, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				name, wv, uv, cv)
		}
	}
	return "", ""
}

// memoryBackedVolumeResize is the kubelet's
// IsMemoryBackedVolumeResizeRequested: the pod's memory limit changes and
// an emptyDir of medium Memory without sizeLimit takes its size from it.
func memoryBackedVolumeResize(desired, allocated *corev1.Pod) bool {
	has := false
	for _, v := range desired.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit == nil {
			has = true
		}
	}
	if !has {
		return false
	}
	a := resourcehelper.PodLimits(allocated, resourcehelper.PodResourcesOptions{})[corev1.ResourceMemory]
	d := resourcehelper.PodLimits(desired, resourcehelper.PodResourcesOptions{})[corev1.ResourceMemory]
	return a.Cmp(d) != 0
}

// resizeMessage is the kubelet's podResizeMessage: prefix and the
// resources of the spec as JSON.
func resizeMessage(pod *corev1.Pod, generation int64, errMsg, prefix string) string {
	type alloc struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	}
	sum := struct {
		InitContainers []alloc `json:"initContainers,omitempty"`
		Containers     []alloc `json:"containers,omitempty"`
		Generation     int64   `json:"generation"`
		Error          string  `json:"error,omitempty"`
	}{Generation: generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		sum.InitContainers = append(sum.InitContainers, alloc{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		sum.Containers = append(sum.Containers, alloc{c.Name, c.Resources})
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(b)
}

// syncResize gives the running containers of pod (with its allocated
// resources) what they were allocated, in the kubelet's
// doPodResizeAction order: the pod cgroup's limits grow (and its shares
// shrink) before the containers are updated, and shrink (grow) after.
// The restarting containers (resizeRestarts) were killed and start again
// with their allocation: only the pod cgroup is resized for them.
func (p *podResources) syncResize(ctx context.Context, pod *corev1.Pod, pr *podRuntime, st *podState, restarting map[string]bool) {
	r := p.podResizeOf(pod)
	type update struct {
		c  *corev1.Container
		id string
	}
	var updates []update
	p.resize.mu.Lock()
	for _, c := range resizable(pod) {
		info := pr.newest(c.Name)
		if info == nil || info.State != runtimeapi.ContainerState_CONTAINER_RUNNING || restarting[c.Name] {
			continue
		}
		ap, ok := r.applied[c.Name]
		if !ok || ap.id != info.ID {
			// Started in this pass: with the allocation.
			ap = appliedResources{id: info.ID, res: *c.Resources.DeepCopy()}
			r.applied[c.Name] = ap
		}
		if !equality.Semantic.DeepEqual(ap.res, c.Resources) {
			updates = append(updates, update{c, info.ID})
		}
	}
	inProgress := r.inProgress
	p.resize.mu.Unlock()
	if len(updates) == 0 && len(restarting) == 0 {
		if inProgress != nil {
			p.finishResize(pod, r)
		}
		return
	}
	fail := func(err error) {
		p.log.Error("Pod resize failed", "pod", podRef(pod), "podUID", pod.UID, "err", err)
		p.resize.mu.Lock()
		msg := err.Error()
		first := r.inProgress == nil || r.inProgress.Message != msg
		if r.inProgress == nil {
			r.inProgress = &corev1.PodCondition{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue,
				ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(p.clock.Now())}
		}
		r.inProgress.Reason, r.inProgress.Message = "Error", msg
		p.resize.mu.Unlock()
		if first {
			p.event(pod, nil, "", corev1.EventTypeWarning, "ResizeError", resizeMessage(pod, pod.Generation, msg, "Pod resize error"))
		}
	}
	qos := podutil.QOSClass(pod)
	pc := p.cgroups
	var want, cur *cgroups.ResourceConfig
	if pc.Manager() != nil && pc.Exists(string(pod.UID), qos) {
		want = pc.PodConfig(pod, qos)
		cur = p.currentPodCgroup(pod, qos)
		if want.Memory != nil && cur.Memory != nil && *want.Memory > 0 && (*cur.Memory <= 0 || *want.Memory < *cur.Memory) {
			if usage := p.podMemoryUsage(pod, qos); usage >= *want.Memory {
				fail(fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", *want.Memory, usage))
				return
			}
		}
		if err := pc.Update(string(pod.UID), qos, widen(cur, want)); err != nil {
			fail(err)
			return
		}
	}
	for _, u := range updates {
		res := &runtimeapi.ContainerResources{Linux: containerResources(pod, u.c, p.capacity.Memory.Value())}
		if err := p.rs.UpdateContainerResources(ctx, u.id, res); err != nil {
			fail(fmt.Errorf("update container %q resources: %w", u.c.Name, err))
			return
		}
		p.resize.mu.Lock()
		r.applied[u.c.Name] = appliedResources{id: u.id, res: *u.c.Resources.DeepCopy()}
		p.resize.mu.Unlock()
		p.log.Info("Updated container resources", "pod", podRef(pod), "podUID", pod.UID, "containerName", u.c.Name, "containerID", u.id)
	}
	if want != nil {
		if err := pc.Update(string(pod.UID), qos, want); err != nil {
			fail(err)
			return
		}
	}
	p.updateQOSCgroups()
	p.finishResize(pod, r)
}

// finishResize clears PodResizeInProgress once everything has its
// allocation (the kubelet's ResizeCompleted).
func (p *podResources) finishResize(pod *corev1.Pod, r *podResize) {
	p.resize.mu.Lock()
	had := r.inProgress != nil
	r.inProgress = nil
	p.resize.mu.Unlock()
	if had {
		p.log.Info("Pod resize completed", "pod", podRef(pod), "podUID", pod.UID, "generation", pod.Generation)
		p.event(pod, nil, "", corev1.EventTypeNormal, "ResizeCompleted", resizeMessage(pod, pod.Generation, "", "Pod resize completed"))
	}
}

// widen is the pod cgroup config that holds both the current and the
// wanted one: the larger limits and the smaller shares.
func widen(cur, want *cgroups.ResourceConfig) *cgroups.ResourceConfig {
	out := &cgroups.ResourceConfig{}
	bigger := func(a, b *int64) *int64 {
		switch {
		case a == nil:
			return b
		case b == nil:
			return a
		case *a <= 0 || *b <= 0: // unlimited
			v := int64(-1)
			return &v
		case *a > *b:
			return a
		}
		return b
	}
	out.Memory = bigger(cur.Memory, want.Memory)
	if want.CPUQuota != nil || cur.CPUQuota != nil {
		out.CPUQuota = bigger(cur.CPUQuota, want.CPUQuota)
		out.CPUPeriod = want.CPUPeriod
	}
	out.CPUShares = want.CPUShares
	if cur.CPUShares != nil && want.CPUShares != nil && *cur.CPUShares < *want.CPUShares {
		out.CPUShares = cur.CPUShares
	}
	return out
}

// currentPodCgroup reads the pod cgroup's memory limit, CPU quota and
// shares (the kubelet's GetPodCgroupConfig); unreadable values stay nil.
func (p *podResources) currentPodCgroup(pod *corev1.Pod, qos corev1.PodQOSClass) *cgroups.ResourceConfig {
	mgr := p.cgroups.Manager()
	n := p.cgroups.PodName(string(pod.UID), qos)
	rc := &cgroups.ResourceConfig{}
	if mgr.V2() {
		if v, err := mgr.ReadInt(n, "", "memory.max"); err == nil {
			rc.Memory = &v
		}
		if q, _, err := mgr.ReadCPUMax(n); err == nil {
			rc.CPUQuota = &q
		}
		return rc
	}
	if v, err := mgr.ReadInt(n, "memory", "memory.limit_in_bytes"); err == nil {
		if v >= 1<<62 {
			v = -1
		}
		rc.Memory = &v
	}
	if v, err := mgr.ReadInt(n, "cpu", "cpu.cfs_quota_us"); err == nil {
		rc.CPUQuota = &v
	}
	if v, err := mgr.ReadInt(n, "cpu", "cpu.shares"); err == nil && v > 0 {
		s := uint64(v)
		rc.CPUShares = &s
	}
	return rc
}

// podMemoryUsage is the pod cgroup's memory usage (0 when unreadable).
func (p *podResources) podMemoryUsage(pod *corev1.Pod, qos corev1.PodQOSClass) int64 {
	mgr := p.cgroups.Manager()
	n := p.cgroups.PodName(string(pod.UID), qos)
	file, ctrl := "memory.usage_in_bytes", "memory"
	if mgr.V2() {
		file, ctrl = "memory.current", ""
	}
	v, err := mgr.ReadInt(n, ctrl, file)
	if err != nil {
		return 0
	}
	return v
}

// resizeObserved adds to o what the resize state knows: each container's
// allocated resources, what its running instance was given, and the
// resize conditions.
func (p *podResources) resizeObserved(pod *corev1.Pod, o *schemas.PodObserved) {
	if pod == nil {
		return
	}
	p.resize.mu.Lock()
	defer p.resize.mu.Unlock()
	r := p.resize.pods[string(pod.UID)]
	if r == nil {
		return
	}
	fill := func(list []schemas.ContainerObserved) {
		for i := range list {
			c := &list[i]
			if a, ok := r.alloc[c.Name]; ok {
				c.Allocated = a.DeepCopy()
			}
			if ap, ok := r.applied[c.Name]; ok && c.State.Running != nil && rawID(c.ContainerID) == ap.id {
				c.Resources = ap.res.DeepCopy()
			}
		}
	}
	fill(o.InitContainers)
	fill(o.Containers)
	for _, c := range []*corev1.PodCondition{r.pending, r.inProgress} {
		if c != nil {
			o.ResizeConditions = append(o.ResizeConditions, *c.DeepCopy())
		}
	}
}
