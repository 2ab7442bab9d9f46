package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	crierrors "k8s.io/cri-api/pkg/errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// minGracePeriod is the least time a container gets between SIGTERM and
// SIGKILL, the kubelet's minimumGracePeriodInSeconds.
const minGracePeriod = 2

// defaultGracePeriod when neither the pod nor the container's annotations
// say.
const defaultGracePeriod = 30

// podKiller is the kill/stop part, the kubelet's killContainer and
// killPodWithSyncResult, and the removal of a pod that is gone (its
// sandboxes, volumes, directories and cgroup).
type podKiller struct {
	cfg   *config.Config
	log   *slog.Logger
	clock Clock
	rs    internalapi.RuntimeService
	// hooks runs PreStop handlers.
	hooks hookRunnerI
	// volumes tears a removed pod's volumes down; resources removes its
	// cgroup.
	volumes   volumeTeardown
	resources podCgroupRemover
	event     eventFunc
}

func newPodKiller(cfg *config.Config, log *slog.Logger, clk Clock, rs internalapi.RuntimeService, hooks hookRunnerI,
	volumes volumeTeardown, resources podCgroupRemover, event eventFunc) *podKiller {
	return &podKiller{cfg: cfg, log: log, clock: clk, rs: rs, hooks: hooks, volumes: volumes, resources: resources, event: event}
}

// hookRunnerI runs a lifecycle handler (hookRunner).
type hookRunnerI interface {
	runHook(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string, h *corev1.LifecycleHandler, podIPs []string) (string, error)
}

// volumeTeardown removes what the volume manager made for a pod
// (VolumeManager).
type volumeTeardown interface {
	Teardown(ctx context.Context, uid string) error
}

// podCgroupRemover removes a pod's cgroup (podResources).
type podCgroupRemover interface {
	removePodCgroup(uid string, pod *corev1.Pod) error
}

var (
	_ hookRunnerI      = (*hookRunner)(nil)
	_ volumeTeardown   = VolumeManager(nil)
	_ podCgroupRemover = (*podResources)(nil)
)

// containerGrace is the grace period to stop c with: the probe's own when
// given, else the pod's deletion grace period, else its
// terminationGracePeriodSeconds, from the spec or (when the spec is gone)
// from the container's annotations.
func containerGrace(pod *corev1.Pod, c *containerInfo, probeGrace *int64) int64 {
	switch {
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case probeGrace != nil:
		return *probeGrace
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		return *pod.Spec.TerminationGracePeriodSeconds
	case pod != nil:
		return defaultGracePeriod
	case c.DeletionGracePeriod != nil:
		return *c.DeletionGracePeriod
	case c.TerminationGracePeriod != nil:
		return *c.TerminationGracePeriod
	}
	return defaultGracePeriod
}

// specOf finds container name in pod (init, app or ephemeral), nil when
// absent.
func specOf(pod *corev1.Pod, name string) *corev1.Container {
	if pod == nil {
		return nil
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if ec := &pod.Spec.EphemeralContainers[i]; ec.Name == name {
			return (*corev1.Container)(&ec.EphemeralContainerCommon)
		}
	}
	return nil
}

// killContainer is the kubelet's killContainer: the Killing event, the
// PreStop hook within the grace period, then StopContainer with what is
// left of it (at least 2 s, unless the grace period is forced). pod may be
// nil (the pod left the sources and nodelet-runtime restarted since):
// hooks then come from the container's annotations.
func (k *podKiller) killContainer(ctx context.Context, pod *corev1.Pod, c *containerInfo, grace int64, forced bool, message, reason string) error {
	spec := specOf(pod, c.Name)
	kind := c.Kind
	if pod != nil {
		kind = containerKind(pod, c.Name)
	}
	if message == "" {
		message = "Stopping container " + c.Name
	}
	if spec != nil {
		k.event(pod, spec, kind, corev1.EventTypeNormal, "Killing", message)
	}
	preStop := c.PreStop
	if spec != nil {
		preStop = nil
		if spec.Lifecycle != nil {
			preStop = spec.Lifecycle.PreStop
		}
	}
	if preStop != nil && grace > 0 && c.running() {
		began := k.clock.Now()
		k.runPreStop(ctx, pod, spec, kind, c, preStop, grace)
		grace -= int64(k.clock.Since(began).Seconds())
	}
	if !forced && grace < minGracePeriod {
		grace = minGracePeriod
	}
	if grace < 0 {
		grace = 0
	}
	k.log.Info("Killing container with a grace period", "containerName", c.Name, "containerID", c.ID, "gracePeriod", grace, "reason", reason)
	if err := k.rs.StopContainer(ctx, c.ID, grace); err != nil && !crierrors.IsNotFound(err) {
		return fmt.Errorf("stop container %s (%s): %w", c.Name, c.ID, err)
	}
	return nil
}

// runPreStop runs a container's PreStop hook and waits for it at most
// grace seconds, as the kubelet's executePreStopHook does: a hook still
// running then is left to run on while the container is stopped (with the
// kill's context, not one that ends with the grace period), so a hook that
// a busy node makes slower than the grace period, but that ends before the
// SIGKILL, is not a failure; one that fails, then or later, is logged and
// gets a FailedPreStopHook event saying only "PreStopHook failed" (the
// kubelet keeps the hook's output out of the event: it may hold secrets).
func (k *podKiller) runPreStop(ctx context.Context, pod *corev1.Pod, spec *corev1.Container, kind string, c *containerInfo, preStop *corev1.LifecycleHandler, grace int64) {
	hookSpec := spec
	if hookSpec == nil {
		hookSpec = &corev1.Container{Name: c.Name, Ports: c.Ports}
	}
	podIPs := k.podIPsOf(ctx, c.SandboxID)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := k.hooks.runHook(ctx, pod, hookSpec, c.ID, preStop, podIPs); err != nil {
			k.log.Info("PreStop hook failed", "containerName", c.Name, "containerID", c.ID, "err", err)
			if spec != nil {
				k.event(pod, spec, kind, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
			}
		}
	}()
	t := k.clock.NewTimer(time.Duration(grace) * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		k.log.Info("PreStop hook not completed in grace period", "containerName", c.Name, "containerID", c.ID, "gracePeriod", grace)
	}
}

// podIPsOf is a sandbox's IPs (for a PreStop HTTP hook), nil when unknown.
func (k *podKiller) podIPsOf(ctx context.Context, sandboxID string) []string {
	resp, err := k.rs.PodSandboxStatus(ctx, sandboxID, false)
	if err != nil {
		return nil
	}
	var ips []string
	if ip := resp.GetStatus().GetNetwork().GetIp(); ip != "" {
		ips = append(ips, ip)
	}
	return ips
}

// killPod stops every running or created container of the pod — app
// containers in parallel first, then sidecars one by one in reverse order
// with what is left of the grace period — and then the pod's sandboxes.
// grace overrides the containers' grace periods when not nil.
func (k *podKiller) killPod(ctx context.Context, pod *corev1.Pod, pr *podRuntime, grace *int64) error {
	var apps, sidecars []*containerInfo
	for _, c := range pr.active() {
		kind := c.Kind
		if pod != nil {
			kind = containerKind(pod, c.Name)
		}
		if kind == schemas.ContainerKindSidecar {
			sidecars = append(sidecars, c)
		} else {
			apps = append(apps, c)
		}
	}
	// Sidecars stop in the reverse of their spec order (the reverse of
	// their creation order when the spec is gone).
	order := func(name string) int {
		if pod != nil {
			for i := range pod.Spec.InitContainers {
				if pod.Spec.InitContainers[i].Name == name {
					return i
				}
			}
		}
		return -1
	}
	for i := 1; i < len(sidecars); i++ {
		for j := i; j > 0; j-- {
			a, b := sidecars[j-1], sidecars[j]
			oa, ob := order(a.Name), order(b.Name)
			if oa < ob || (oa == ob && a.CreatedAt.Before(b.CreatedAt)) {
				sidecars[j-1], sidecars[j] = b, a
			}
		}
	}
	began := k.clock.Now()
	gracePeriod := func(c *containerInfo) (int64, bool) {
		if grace != nil {
			return *grace, true
		}
		return containerGrace(pod, c, nil), false
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, forced := gracePeriod(c)
			if err := k.killContainer(ctx, pod, c, g, forced, "", "Killing"); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, c := range sidecars {
		g, forced := gracePeriod(c)
		g = max(0, g-int64(k.clock.Since(began).Seconds()))
		if err := k.killContainer(ctx, pod, c, g, forced, "", "Killing"); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, sb := range pr.Sandboxes {
		if !sb.Ready {
			continue
		}
		if err := k.rs.StopPodSandbox(ctx, sb.ID); err != nil && !crierrors.IsNotFound(err) {
			return fmt.Errorf("stop sandbox %s: %w", sb.ID, err)
		}
	}
	return nil
}

// removePod removes a killed pod that left the sources, step by step as
// the kubelet's SyncTerminatedPod and pod cleanup do: its sandboxes (and
// with them its containers), then its volumes, directories and logs, and
// last its cgroup.
func (k *podKiller) removePod(ctx context.Context, uid string, pod *corev1.Pod, pr *podRuntime) error {
	if err := k.removeSandboxes(ctx, pr); err != nil {
		return err
	}
	if err := k.volumes.Teardown(ctx, uid); err != nil {
		return fmt.Errorf("tear down volumes: %w", err)
	}
	k.removePodDirs(uid, pod, pr)
	_ = k.resources.removePodCgroup(uid, pod) // logged; the orphan cleanup tries again
	return nil
}

// removeSandboxes removes the pod's sandboxes and the containers of none
// (left by a failed sandbox creation).
func (k *podKiller) removeSandboxes(ctx context.Context, pr *podRuntime) error {
	var errs []error
	for _, sb := range pr.Sandboxes {
		if err := k.rs.RemovePodSandbox(ctx, sb.ID); err != nil && !crierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", sb.ID, err))
		}
	}
	for _, c := range pr.Containers {
		if err := k.rs.RemoveContainer(ctx, c.ID); err != nil && !crierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// removePodDirs removes the pod's directory under the state dir and its
// log directory.
func (k *podKiller) removePodDirs(uid string, pod *corev1.Pod, pr *podRuntime) {
	_ = volumes.RemoveAll(podDir(k.cfg.Node.StateDir, uid))
	ns, name := pr.Namespace, pr.Name
	if pod != nil {
		ns, name = pod.Namespace, pod.Name
	}
	if name != "" {
		_ = volumes.RemoveAll(podLogDirOf(k.cfg.Node.PodLogsDir, ns, name, uid))
	}
}

// stopSandboxes stops ready sandboxes that are not the pod's current one.
func (k *podKiller) stopSandboxes(ctx context.Context, sbs []*sandboxInfo) error {
	for _, sb := range sbs {
		if err := k.rs.StopPodSandbox(ctx, sb.ID); err != nil && !crierrors.IsNotFound(err) {
			return fmt.Errorf("stop sandbox %s: %w", sb.ID, err)
		}
	}
	return nil
}

// removeDeadSandboxes removes the pod's sandboxes other than current that
// are stopped and hold no containers (left by a creation that was cut
// short, or replaced): as the kubelet's sandbox GC does for pods that
// still exist, so that a pod has exactly one sandbox.
func (k *podKiller) removeDeadSandboxes(ctx context.Context, pod *corev1.Pod, pr *podRuntime, current *sandboxInfo) {
	for _, sb := range pr.Sandboxes {
		if sb == current || sb.ID == current.ID || sb.Ready {
			continue
		}
		empty := true
		for _, c := range pr.Containers {
			if c.SandboxID == sb.ID {
				empty = false
			}
		}
		if !empty {
			continue
		}
		if err := k.rs.RemovePodSandbox(ctx, sb.ID); err != nil && !crierrors.IsNotFound(err) {
			k.log.Warn("Cannot remove dead sandbox", "pod", podRef(pod), "podUID", pod.UID, "sandboxID", sb.ID, "err", err)
			continue
		}
		k.log.Info("Removed dead sandbox", "pod", podRef(pod), "podUID", pod.UID, "sandboxID", sb.ID, "attempt", sb.Attempt)
	}
}
