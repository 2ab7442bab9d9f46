package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/podutil"
)

// containerGC is the kubelet's container garbage collector
// (pkg/kubelet/kuberuntime/kuberuntime_gc.go containerGC): dead containers
// by policy, sandboxes without containers, and the log directories of
// removed pods. It owns its lock; the pod state tells it what may go.
type containerGC struct {
	policy     *config.GCConfig
	podLogsDir string
	log        *slog.Logger
	clock      clock.Clock
	rt         containerRuntime
	state      containerPods
	evictions  staleEvictions

	mu sync.Mutex
	// lastRemoval is when a container was last removed, by any pass.
	lastRemoval time.Time
}

// containerRuntime is the part of CRI container GC uses.
type containerRuntime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
}

// containerPods is the kubelet's podStateProvider: what container GC asks
// of the pod state.
type containerPods interface {
	allSourcesReady() bool
	shouldContentBeRemoved(uid string) bool
	shouldRuntimeBeRemoved(uid string) bool
}

// staleEvictions forgets the evictions of pods that are gone, at the end of
// each container GC pass.
type staleEvictions interface {
	forgetStaleEvictions(ctx context.Context)
}

var (
	_ containerRuntime = (internalapi.RuntimeService)(nil)
	_ containerPods    = (*podState)(nil)
	_ staleEvictions   = (*evictionRecords)(nil)
)

// containerGCInfo is one dead container considered for removal.
type containerGCInfo struct {
	id, name, podUID, podName, podNamespace string
	created                                 time.Time
	attempt                                 uint32
	// unknown: the runtime does not know whether it runs; it is stopped
	// before removal, as the kubelet does.
	unknown bool
}

// evictUnit is a pod's container (by name): its dead instances are counted
// together.
type evictUnit struct {
	uid, name string
}

type containersByEvictUnit map[evictUnit][]containerGCInfo

func (u containersByEvictUnit) numContainers() int {
	n := 0
	for _, c := range u {
		n += len(c)
	}
	return n
}

// byAttempt sorts newest first: by attempt, then by creation.
func byAttempt(c []containerGCInfo) {
	sort.SliceStable(c, func(i, j int) bool {
		if c[i].attempt == c[j].attempt {
			return c[i].created.After(c[j].created)
		}
		return c[i].attempt > c[j].attempt
	})
}

// containerGCResult says what a pass removed, for logs and tests.
type containerGCResult struct {
	Containers []string // IDs, in removal order
	Sandboxes  []string
	LogDirs    []string
}

// garbageCollect is the kubelet's containerGC.GarbageCollect: dead
// containers by policy, then sandboxes without containers, then the log
// directories of removed pods. evictNonDeletedPods (under disk pressure)
// also removes every dead container and sandbox of pods whose runtime is
// final though the pod still exists.
func (cg *containerGC) garbageCollect(ctx context.Context, evictNonDeletedPods bool) (containerGCResult, error) {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	var res containerGCResult
	var errs []error
	if err := cg.evictContainers(ctx, evictNonDeletedPods, &res); err != nil {
		errs = append(errs, err)
	}
	if err := cg.evictSandboxes(ctx, evictNonDeletedPods, &res); err != nil {
		errs = append(errs, err)
	}
	if err := cg.evictPodLogDirs(ctx, &res); err != nil {
		errs = append(errs, err)
	}
	cg.evictions.forgetStaleEvictions(ctx)
	return res, errors.Join(errs...)
}

// evictableContainers lists the managed containers that are not running and
// were created before newestGCTime, by pod container.
func (cg *containerGC) evictableContainers(ctx context.Context, newestGCTime time.Time) (containersByEvictUnit, error) {
	containers, err := cg.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	units := containersByEvictUnit{}
	for _, c := range containers {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		created := time.Unix(0, c.GetCreatedAt())
		if newestGCTime.Before(created) {
			continue
		}
		info := containerGCInfo{
			id: c.GetId(), name: c.GetMetadata().GetName(),
			podUID: c.GetLabels()[cri.LabelPodUID], podName: c.GetLabels()[cri.LabelPodName],
			podNamespace: c.GetLabels()[cri.LabelPodNamespace],
			created:      created, attempt: c.GetMetadata().GetAttempt(),
			unknown: c.GetState() == runtimeapi.ContainerState_CONTAINER_UNKNOWN,
		}
		if info.podUID == "" {
			// Not made the way nodelet-runtime makes containers: leave it.
			continue
		}
		key := evictUnit{uid: info.podUID, name: info.name}
		units[key] = append(units[key], info)
	}
	return units, nil
}

func (cg *containerGC) evictContainers(ctx context.Context, evictNonDeletedPods bool, res *containerGCResult) error {
	policy := cg.policy
	units, err := cg.evictableContainers(ctx, cg.clock.Now().Add(-policy.MinAge))
	if err != nil {
		return err
	}
	// The containers of removed pods all go, once every source is ready.
	if cg.state.allSourcesReady() {
		for key, unit := range units {
			if cg.state.shouldContentBeRemoved(key.uid) || (evictNonDeletedPods && cg.state.shouldRuntimeBeRemoved(key.uid)) {
				cg.removeOldestN(ctx, unit, len(unit), res)
				delete(units, key)
			}
		}
	}
	// Every other pod keeps at least its newest dead instance of each
	// container: status derives the container's (last) state from it.
	perUnit := max(policy.MaxPerPodContainer, 1)
	cg.enforceMaxPerUnit(ctx, units, perUnit, res)

	if policy.MaxContainers >= 0 && units.numContainers() > policy.MaxContainers {
		// Leave an equal number per unit (at least one), then the oldest
		// of the rest go, never a unit's newest.
		n := max(policy.MaxContainers/max(len(units), 1), 1)
		cg.enforceMaxPerUnit(ctx, units, n, res)
		if total := units.numContainers(); total > policy.MaxContainers {
			var rest []containerGCInfo
			for key, unit := range units {
				byAttempt(unit)
				units[key] = unit
				rest = append(rest, unit[1:]...)
			}
			byAttempt(rest)
			toRemove := min(total-policy.MaxContainers, len(rest))
			cg.removeOldestN(ctx, rest, toRemove, res)
		}
	}
	return nil
}

func (cg *containerGC) enforceMaxPerUnit(ctx context.Context, units containersByEvictUnit, keep int, res *containerGCResult) {
	for key, unit := range units {
		if toRemove := len(unit) - keep; toRemove > 0 {
			units[key] = cg.removeOldestN(ctx, unit, toRemove, res)
		}
	}
}

// removeOldestN removes the toRemove oldest of containers and returns the
// rest. Failures are logged and the container counted as removed, as the
// kubelet does, so one stuck container does not make the pass aggressive.
func (cg *containerGC) removeOldestN(ctx context.Context, containers []containerGCInfo, toRemove int, res *containerGCResult) []containerGCInfo {
	numToKeep := len(containers) - toRemove
	if numToKeep > 0 {
		byAttempt(containers)
	}
	for i := len(containers) - 1; i >= numToKeep; i-- {
		if ctx.Err() != nil {
			break
		}
		c := containers[i]
		if c.unknown {
			if err := cg.rt.StopContainer(ctx, c.id, 2); err != nil && !crierrors.IsNotFound(err) {
				cg.log.Error("Failed to stop container in unknown state before removal", "containerID", c.id, "err", err)
				continue
			}
		}
		if err := cg.removeContainer(ctx, c); err != nil {
			cg.log.Error("Failed to remove container", "pod", podutil.Ref(c.podNamespace, c.podName), "podUID", c.podUID, "containerName", c.name, "containerID", c.id, "err", err)
			continue
		}
		res.Containers = append(res.Containers, c.id)
		cg.lastRemoval = cg.clock.Now()
	}
	return containers[:max(numToKeep, 0)]
}

// lastRemovalAt is when a pass last removed a container (zero: never).
func (cg *containerGC) lastRemovalAt() time.Time {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	return cg.lastRemoval
}

// removeContainer removes the container's log files (rotated ones too), then
// the container, as the kubelet's removeContainer. A container already gone
// counts as removed: a pass cut short is simply finished by the next one.
func (cg *containerGC) removeContainer(ctx context.Context, c containerGCInfo) error {
	st, err := cg.rt.ContainerStatus(ctx, c.id, false)
	if err != nil {
		if crierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("container status: %w", err)
	}
	if lp := st.GetStatus().GetLogPath(); lp != "" {
		files, _ := filepath.Glob(lp + "*")
		for _, f := range files {
			size := fileSize(f)
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("remove container log %s: %w", f, err)
			}
			removedTotal.WithLabelValues(objLogFile).Inc()
			reclaimedBytes.WithLabelValues(objContainerLog).Add(float64(size))
		}
	}
	if err := cg.rt.RemoveContainer(ctx, c.id); err != nil && !crierrors.IsNotFound(err) {
		return err
	}
	removedTotal.WithLabelValues(objContainer).Inc()
	cg.log.Info("Removed dead container", "pod", podutil.Ref(c.podNamespace, c.podName), "podUID", c.podUID,
		"containerName", c.name, "containerID", c.id, "attempt", c.attempt)
	return nil
}

// sandboxGCInfo is one sandbox considered for removal.
type sandboxGCInfo struct {
	id, podName, podNamespace string
	created                   time.Time
	attempt                   uint32
	// active: ready, or still holding containers.
	active bool
}

// evictSandboxes removes sandboxes that are not ready and hold no
// containers: all of them for a removed pod, all but the newest otherwise.
func (cg *containerGC) evictSandboxes(ctx context.Context, evictNonDeletedPods bool, res *containerGCResult) error {
	containers, err := cg.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	sandboxes, err := cg.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	hasContainers := map[string]bool{}
	for _, c := range containers {
		hasContainers[c.GetPodSandboxId()] = true
	}
	byPod := map[string][]sandboxGCInfo{}
	for _, sb := range sandboxes {
		uid := sb.GetMetadata().GetUid()
		if uid == "" {
			continue
		}
		byPod[uid] = append(byPod[uid], sandboxGCInfo{
			id: sb.GetId(), podName: sb.GetMetadata().GetName(), podNamespace: sb.GetMetadata().GetNamespace(),
			created: time.Unix(0, sb.GetCreatedAt()), attempt: sb.GetMetadata().GetAttempt(),
			active: sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || hasContainers[sb.GetId()],
		})
	}
	for uid, sbs := range byPod {
		if cg.state.shouldContentBeRemoved(uid) || (evictNonDeletedPods && cg.state.shouldRuntimeBeRemoved(uid)) {
			cg.removeOldestNSandboxes(ctx, uid, sbs, len(sbs), res)
		} else {
			cg.removeOldestNSandboxes(ctx, uid, sbs, len(sbs)-1, res)
		}
	}
	return nil
}

func (cg *containerGC) removeOldestNSandboxes(ctx context.Context, uid string, sbs []sandboxGCInfo, toRemove int, res *containerGCResult) {
	numToKeep := len(sbs) - toRemove
	if numToKeep > 0 {
		sort.SliceStable(sbs, func(i, j int) bool {
			if sbs[i].attempt == sbs[j].attempt {
				return sbs[i].created.After(sbs[j].created)
			}
			return sbs[i].attempt > sbs[j].attempt
		})
	}
	for i := len(sbs) - 1; i >= numToKeep; i-- {
		sb := sbs[i]
		if sb.active || ctx.Err() != nil {
			continue
		}
		// The runtime should have stopped it; stop it anyway, as the
		// kubelet does, so that its network is torn down first.
		if err := cg.rt.StopPodSandbox(ctx, sb.id); err != nil && !crierrors.IsNotFound(err) {
			cg.log.Error("Failed to stop sandbox before removing", "pod", podutil.Ref(sb.podNamespace, sb.podName), "podUID", uid, "podSandboxID", sb.id, "err", err)
			continue
		}
		if err := cg.rt.RemovePodSandbox(ctx, sb.id); err != nil && !crierrors.IsNotFound(err) {
			cg.log.Error("Failed to remove sandbox", "pod", podutil.Ref(sb.podNamespace, sb.podName), "podUID", uid, "podSandboxID", sb.id, "err", err)
			continue
		}
		removedTotal.WithLabelValues(objSandbox).Inc()
		res.Sandboxes = append(res.Sandboxes, sb.id)
		cg.log.Info("Removed pod sandbox", "pod", podutil.Ref(sb.podNamespace, sb.podName), "podUID", uid, "podSandboxID", sb.id)
	}
}

// evictPodLogDirs removes the log directories of removed pods, once every
// source is ready. A directory whose pod still has a container or sandbox
// in the runtime stays until those are gone.
func (cg *containerGC) evictPodLogDirs(ctx context.Context, res *containerGCResult) error {
	if !cg.state.allSourcesReady() {
		return nil
	}
	root := cg.podLogsDir
	dirs, err := os.ReadDir(root)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pod logs directory %s: %w", root, err)
	}
	inRuntime, err := cg.podsInRuntime(ctx)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if !d.IsDir() || ctx.Err() != nil {
			continue
		}
		uid := podUIDFromLogDir(d.Name())
		if uid == "" || inRuntime[uid] || !cg.state.shouldContentBeRemoved(uid) {
			continue
		}
		p := filepath.Join(root, d.Name())
		size, _ := du(p)
		if err := os.RemoveAll(p); err != nil {
			cg.log.Error("Failed to remove pod logs directory", "path", p, "podUID", uid, "err", err)
			continue
		}
		removedTotal.WithLabelValues(objPodLogDir).Inc()
		reclaimedBytes.WithLabelValues(objPodLogDir).Add(float64(size))
		res.LogDirs = append(res.LogDirs, p)
		cg.log.Info("Removed pod logs directory", "path", p, "podUID", uid)
	}
	return nil
}

// podsInRuntime lists the pod UIDs that still have a managed container or
// sandbox.
func (cg *containerGC) podsInRuntime(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	containers, err := cg.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers {
		out[c.GetLabels()[cri.LabelPodUID]] = true
	}
	sandboxes, err := cg.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, sb := range sandboxes {
		out[sb.GetMetadata().GetUid()] = true
	}
	return out, nil
}

func fileSize(p string) int64 {
	if fi, err := os.Stat(p); err == nil {
		return fi.Size()
	}
	return 0
}
