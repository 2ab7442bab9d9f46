package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"

	"github.com/nodelet/nodelet/internal/containerd"
)

// Namespace holds every bench pod of every contender, so that the bench's
// CRI queries see only its own pods.
const Namespace = "nodelet-bench"

// CRI label keys, the kubelet's.
const (
	labelPodName      = kubetypes.KubernetesPodNameLabel
	labelPodNamespace = kubetypes.KubernetesPodNamespaceLabel
	labelPodUID       = kubetypes.KubernetesPodUIDLabel
	labelContainer    = kubetypes.KubernetesContainerNameLabel
)

// pollEvery is how often the bench asks CRI during a burst: often enough
// for a tenth of a second resolution, rarely enough not to load containerd
// (the per-pod times come from CRI's own StartedAt, not from polling).
const pollEvery = 100 * time.Millisecond

// criClient is the bench's raw CRI connection: the floor's calls and the
// observer's queries, without any client-side machinery in between.
type criClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

func dialCRI(address string) (*criClient, error) {
	conn, err := containerd.Dial(address)
	if err != nil {
		return nil, err
	}
	return &criClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

func (c *criClient) Close() { _ = c.conn.Close() }

var ours = map[string]string{labelPodNamespace: Namespace}

// list returns the bench's containers and sandboxes.
func (c *criClient) list(ctx context.Context) ([]*runtimeapi.Container, []*runtimeapi.PodSandbox, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := c.rt.ListContainers(cctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: ours}})
	if err != nil {
		return nil, nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	sbs, err := c.rt.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: ours}})
	if err != nil {
		return nil, nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	return cs.Containers, sbs.Items, nil
}

// waitRunning polls until every pod of want (namespace/name) has a running
// container, and returns the running containers' IDs by pod.
func (c *criClient) waitRunning(ctx context.Context, want map[string]bool) (map[string]string, error) {
	ids := map[string]string{}
	for {
		cs, _, err := c.list(ctx)
		if err != nil {
			return ids, err
		}
		for _, ct := range cs {
			pod := ct.Labels[labelPodNamespace] + "/" + ct.Labels[labelPodName]
			if want[pod] && ct.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				ids[pod] = ct.Id
			}
		}
		if len(ids) >= len(want) {
			return ids, nil
		}
		select {
		case <-ctx.Done():
			return ids, fmt.Errorf("%d of %d pods running: %w", len(ids), len(want), ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// startedAt asks CRI when each container started.
func (c *criClient) startedAt(ctx context.Context, ids map[string]string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for pod, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := c.rt.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		cancel()
		if err != nil {
			return out, fmt.Errorf("CRI ContainerStatus %s of %s: %w", id, pod, err)
		}
		if st.Status.StartedAt == 0 {
			return out, fmt.Errorf("container %s of %s has no start time", id, pod)
		}
		out[pod] = time.Unix(0, st.Status.StartedAt)
	}
	return out, nil
}

// waitGone polls until no container or sandbox of the bench is left.
func (c *criClient) waitGone(ctx context.Context) error {
	for {
		cs, sbs, err := c.list(ctx)
		if err != nil {
			return err
		}
		if len(cs) == 0 && len(sbs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d containers and %d sandboxes left: %w", len(cs), len(sbs), ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// removeAll stops and removes every sandbox of the bench (and so its
// containers), and returns how many there were.
func (c *criClient) removeAll(ctx context.Context) (int, error) {
	_, sbs, err := c.list(ctx)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(sbs))
	for i, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if _, err := c.rt.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
				errs[i] = fmt.Errorf("stop sandbox %s: %w", sb.Id, err)
				return
			}
			if _, err := c.rt.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
				errs[i] = fmt.Errorf("remove sandbox %s: %w", sb.Id, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return len(sbs), err
		}
	}
	return len(sbs), nil
}

// version is the runtime's name and version.
func (c *criClient) version(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := c.rt.Version(cctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return "unknown"
	}
	return v.RuntimeName + " " + v.RuntimeVersion
}
