package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/nodelet/nodelet/internal/podutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// Container waiting reasons the runtime sets itself, the kubelet's.
const (
	reasonContainerCreating    = "ContainerCreating"
	reasonPodInitializing      = "PodInitializing"
	reasonCrashLoopBackOff     = "CrashLoopBackOff"
	reasonCreateConfigError    = "CreateContainerConfigError"
	reasonCreateContainerError = "CreateContainerError"
	reasonRunContainerError    = "RunContainerError"
	reasonPostStartHookError   = "PostStartHookError"
)

// observedWriter publishes PodObserved through the bucket's single writer,
// only on change, counting changes in Generation (continued across
// restarts from what the bucket holds).
type observedWriter struct {
	w   *bus.Writer
	log *slog.Logger

	mu   sync.Mutex
	last map[string]*schemas.PodObserved
}

func newObservedWriter(c *bus.Conn, log *slog.Logger) *observedWriter {
	o := &observedWriter{log: log, last: map[string]*schemas.PodObserved{}}
	o.w = bus.NewWriter(c, bus.BucketObserved, func() error {
		// The store was wiped: write everything again (the writer calls
		// again while a put fails).
		o.mu.Lock()
		defer o.mu.Unlock()
		for uid, p := range o.last {
			if _, _, err := o.w.Put(context.Background(), uid, p); err != nil {
				return fmt.Errorf("observed state of pod %s: %w", uid, err)
			}
		}
		return nil
	})
	return o
}

// load reads what the bucket holds, so generations continue.
func (o *observedWriter) load(ctx context.Context) error {
	keys, err := o.w.Keys(ctx)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		data, _, ok, err := o.w.Data(ctx, k)
		if err != nil || !ok {
			continue
		}
		var p schemas.PodObserved
		if json.Unmarshal(data, &p) == nil {
			o.last[k] = &p
		}
	}
	return nil
}

// get returns the last published state of uid.
func (o *observedWriter) get(uid string) *schemas.PodObserved {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[uid]
}

// publish writes p when it differs from the last published state.
func (o *observedWriter) publish(ctx context.Context, p *schemas.PodObserved) (bool, error) {
	o.mu.Lock()
	prev := o.last[p.UID]
	if prev != nil {
		p.Generation = prev.Generation
		if reflect.DeepEqual(normalised(prev), normalised(p)) {
			o.mu.Unlock()
			return false, nil
		}
	}
	p.Generation++
	o.mu.Unlock()
	if _, _, err := o.w.Put(ctx, p.UID, p); err != nil {
		return false, err
	}
	o.mu.Lock()
	o.last[p.UID] = p
	o.mu.Unlock()
	return true, nil
}

// normalised is p through JSON (times at the precision they travel with).
func normalised(p *schemas.PodObserved) map[string]any {
	b, _ := json.Marshal(p)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (o *observedWriter) delete(ctx context.Context, uid string) error {
	if _, err := o.w.Delete(ctx, uid); err != nil {
		return err
	}
	o.mu.Lock()
	delete(o.last, uid)
	o.mu.Unlock()
	return nil
}

func (o *observedWriter) uids() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Collect(maps.Keys(o.last))
}

// buildObserved is the pod's observed state from what CRI has (pr), the
// spec (nil when only CRI knows the pod) and the worker's reasons.
func buildObserved(runtimeName string, pod *corev1.Pod, pr *podRuntime, st *podState, a *podActions) *schemas.PodObserved {
	o := &schemas.PodObserved{UID: pr.UID, Namespace: pr.Namespace, Name: pr.Name}
	if pod != nil {
		o.UID, o.Namespace, o.Name = string(pod.UID), pod.Namespace, pod.Name
		o.PodGeneration = pod.Generation
	}
	if sb := pr.newestSandbox(); sb != nil {
		o.Sandbox = &schemas.SandboxObserved{ID: sb.ID, Attempt: sb.Attempt, Ready: sb.Ready, IPs: sb.IPs, CreatedAt: sb.CreatedAt}
	}
	ph := st.phase()
	o.Reason, o.Message = ph.Reason, ph.Message
	o.Terminating, o.Terminated, o.Finished = ph.Terminating, ph.Terminated, ph.Finished
	if pod == nil {
		// Only CRI knows the pod: report its containers as they are.
		for _, c := range pr.Containers {
			if pr.newest(c.Name) != c {
				continue
			}
			co := containerObserved(runtimeName, c.Name, c.Kind, "", pr, nil, false)
			switch c.Kind {
			case schemas.ContainerKindApp, "":
				o.Containers = append(o.Containers, co)
			case schemas.ContainerKindEphemeral:
				o.EphemeralContainers = append(o.EphemeralContainers, co)
			default:
				o.InitContainers = append(o.InitContainers, co)
			}
		}
		return o
	}
	initDone := a != nil && a.InitDone
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := schemas.ContainerKindInit
		if podutil.IsRestartableInit(c) {
			kind = schemas.ContainerKindSidecar
		}
		o.InitContainers = append(o.InitContainers, containerObserved(runtimeName, c.Name, kind, c.Image, pr, st.waitingOf(c.Name), false))
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		o.Containers = append(o.Containers, containerObserved(runtimeName, c.Name, schemas.ContainerKindApp, c.Image, pr, st.waitingOf(c.Name), !initDone && len(pod.Spec.InitContainers) > 0))
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		o.EphemeralContainers = append(o.EphemeralContainers, containerObserved(runtimeName, c.Name, schemas.ContainerKindEphemeral, c.Image, pr, st.waitingOf(c.Name), false))
	}
	return o
}

// containerObserved is one container's observed state: its newest
// instance (Running or Terminated, or Waiting with the worker's reason
// while it waits to restart), the one before as the last termination
// state, or Waiting when it was never created.
func containerObserved(runtimeName, name, kind, image string, pr *podRuntime, wait *waitError, initializing bool) schemas.ContainerObserved {
	co := schemas.ContainerObserved{Name: name, Kind: kind, Image: image}
	c := pr.newest(name)
	if c == nil {
		reason := reasonContainerCreating
		if initializing || kind == schemas.ContainerKindInit || kind == schemas.ContainerKindSidecar {
			reason = reasonPodInitializing
		}
		co.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		if wait != nil {
			co.State.Waiting = &corev1.ContainerStateWaiting{Reason: wait.Reason, Message: wait.Message}
		}
		return co
	}
	co.ContainerID = runtimeName + "://" + c.ID
	co.ImageID = c.ImageRef
	if co.Image == "" {
		co.Image = c.Image
	}
	co.Hash = c.Hash
	co.RestartCount = int32(c.RestartCount)
	switch {
	case c.running():
		co.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		if prev := pr.previous(c); prev != nil && prev.exited() {
			co.LastTerminationState.Terminated = terminated(runtimeName, prev)
		}
	case c.exited():
		if wait != nil {
			// Waiting to restart (CrashLoopBackOff, an image problem, ...):
			// the instance that exited is the last termination state.
			co.State.Waiting = &corev1.ContainerStateWaiting{Reason: wait.Reason, Message: wait.Message}
			co.LastTerminationState.Terminated = terminated(runtimeName, c)
		} else {
			co.State.Terminated = terminated(runtimeName, c)
			if prev := pr.previous(c); prev != nil && prev.exited() {
				co.LastTerminationState.Terminated = terminated(runtimeName, prev)
			}
		}
	default: // created, not started
		reason := reasonContainerCreating
		if wait != nil {
			reason = wait.Reason
		}
		co.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		if wait != nil {
			co.State.Waiting.Message = wait.Message
		}
	}
	return co
}

func terminated(runtimeName string, c *containerInfo) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    c.ExitCode,
		Reason:      c.Reason,
		Message:     c.Message,
		StartedAt:   metav1.NewTime(c.StartedAt),
		FinishedAt:  metav1.NewTime(c.FinishedAt),
		ContainerID: runtimeName + "://" + c.ID,
	}
}
