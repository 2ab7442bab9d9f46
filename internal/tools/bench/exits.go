package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// exitSamples is how many containers of a burst are killed, one after
// another, to time exit → status.
const exitSamples = 10

// statusPollEvery is how often an agent's /pods is read while an exit is
// timed: the figure carries up to this much (half of it on average) of
// polling delay, the same for every contender.
const statusPollEvery = 20 * time.Millisecond

// podLister reads an agent's pods as its read-only API reports them.
type podLister func(ctx context.Context) (*corev1.PodList, error)

// measureExits kills the main process of up to exitSamples of the burst's
// containers (ids: pod → running container ID), one at a time, and times
// each from the exit (CRI's finishedAt) to the first /pods answer in which
// the pod's status no longer shows that container running: the agent
// noticed the exit and published it. The containers are restarted by the
// agent (restartPolicy Always); the teardown removes them as usual.
func (b *bencher) measureExits(ctx context.Context, pods podLister, ids map[string]string) ([]Dur, error) {
	names := make([]string, 0, len(ids))
	for pod := range ids {
		names = append(names, pod)
	}
	sort.Strings(names)
	if len(names) > exitSamples {
		names = names[:exitSamples]
	}
	var out []Dur
	for _, pod := range names {
		d, err := b.timeExit(ctx, pods, pod, ids[pod])
		if err != nil {
			return out, fmt.Errorf("exit → status of %s: %w", pod, err)
		}
		out = append(out, Dur(d))
	}
	return out, nil
}

func (b *bencher) timeExit(ctx context.Context, pods podLister, pod, id string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pid, err := b.cri.containerPID(ctx, id)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %d: %w", pid, err)
	}
	var seen time.Time
	for seen.IsZero() {
		l, err := pods(ctx)
		if err != nil {
			return 0, err
		}
		at := time.Now()
		if !showsRunning(l, pod, id) {
			seen = at
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("status still shows %.12s running: %w", id, ctx.Err())
		case <-time.After(statusPollEvery):
		}
	}
	finished, err := b.cri.finishedAt(ctx, id)
	if err != nil {
		return 0, err
	}
	return seen.Sub(finished), nil
}

// showsRunning: the pod's status in l has container id running.
func showsRunning(l *corev1.PodList, pod, id string) bool {
	for i := range l.Items {
		p := &l.Items[i]
		if p.Namespace+"/"+p.Name != pod {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil && podutil.RawContainerID(c.ContainerID) == id {
				return true
			}
		}
	}
	return false
}

// containerPID is the host PID of a running container's main process, from
// the runtime's verbose status (containerd: info.pid).
func (c *criClient) containerPID(ctx context.Context, id string) (int, error) {
	st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("CRI ContainerStatus %s: %w", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("container %s: no pid in the runtime's verbose status (%v)", id, err)
	}
	return info.Pid, nil
}

// finishedAt waits for CRI to report the container exited and returns
// when it did.
func (c *criClient) finishedAt(ctx context.Context, id string) (time.Time, error) {
	for {
		st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return time.Time{}, fmt.Errorf("CRI ContainerStatus %s: %w", id, err)
		}
		if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.Status.FinishedAt != 0 {
			return time.Unix(0, st.Status.FinishedAt), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("container %s not exited: %w", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
