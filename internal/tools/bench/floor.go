package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/images"
)

// The bench pod: busybox `sleep 3600`, one container, grace 2 s.
const (
	containerName = "sleep"
	graceSeconds  = 2
)

// CgroupRoot is the parent of every bench pod's cgroup, nodelet's
// (runtime.cgroupRoot) and the floor's alike: one per bench process. A
// shared one let a second bench (another test binary on the machine) and
// its nodelet-runtime's orphaned-pod-cgroup cleanup kill this bench's
// pods and remove their cgroups mid-burst (the 110-pod run of 2026-12-05:
// 114 sandboxes recreated in one round, a floor round failed).
var CgroupRoot = fmt.Sprintf("/nodelet-bench-%d", os.Getpid())

var podCommand = []string{"sleep", "3600"}

// floorPod is one pod the floor makes: what nodelet-runtime would give
// CRI for the same static pod, made by hand.
type floorPod struct {
	name, uid string
	dir       string // its log directory and files
	sandboxID string
	ctrID     string
}

func (p *floorPod) ref() string { return Namespace + "/" + p.name }

func (p *floorPod) labels() map[string]string {
	return map[string]string{labelPodName: p.name, labelPodNamespace: Namespace, labelPodUID: p.uid}
}

// sandboxConfig is what generatePodSandboxConfig makes of a BestEffort pod
// on the pod network with the node's DNS.
func (p *floorPod) sandboxConfig(dns *runtimeapi.DNSConfig) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.name, Namespace: Namespace, Uid: p.uid},
		Hostname:     p.name,
		LogDirectory: filepath.Join(p.dir, "logs"),
		DnsConfig:    dns,
		Labels:       p.labels(),
		Annotations:  map[string]string{"kubernetes.io/config.source": "bench"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: CgroupRoot + "/besteffort/pod" + p.uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD,
					Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
				// The kubelet's generatePodSandboxLinuxConfig runs every
				// sandbox under RuntimeDefault (kubernetes#84623), as
				// nodelet does: runc loads the filter into the pause
				// process, ~17 ms a sandbox on these machines.
				Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			},
		},
	}
}

// containerConfig is what generateContainerConfig makes of the bench
// container: its /etc/hosts and termination log bind-mounted as the
// kubelet does.
func (p *floorPod) containerConfig() *runtimeapi.ContainerConfig {
	l := p.labels()
	l[labelContainer] = containerName
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: containerName},
		Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage, UserSpecifiedImage: images.BusyboxImage},
		Command:  podCommand,
		Labels:   l,
		LogPath:  filepath.Join(containerName, "0.log"),
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/etc/hosts", HostPath: filepath.Join(p.dir, "etc-hosts")},
			{ContainerPath: "/dev/termination-log", HostPath: filepath.Join(p.dir, "termination-log")},
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD,
					Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
}

// prepare writes the pod's files, as the kubelet does before it calls CRI.
func (p *floorPod) prepare() error {
	if err := os.MkdirAll(filepath.Join(p.dir, "logs", containerName), 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n# %s\n", p.name)
	if err := os.WriteFile(filepath.Join(p.dir, "etc-hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "termination-log"), nil, 0o666)
}

// hostDNS is the node's resolv.conf as CRI DNS settings: what a pod with
// dnsPolicy ClusterFirst gets on a node without clusterDNS.
func hostDNS(path string) *runtimeapi.DNSConfig {
	dns := &runtimeapi.DNSConfig{}
	f, err := os.Open(path)
	if err != nil {
		return dns
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			dns.Servers = append(dns.Servers, fields[1])
		case "search":
			dns.Searches = fields[1:]
		case "options":
			dns.Options = append(dns.Options, fields[1:]...)
		}
	}
	return dns
}

// floorStart creates the pods straight through CRI, every pod at once with
// RunPodSandbox bounded as nodelet bounds it (0 = unbounded), and returns
// each pod's moments: RunPodSandbox and StartContainer returning.
func floorStart(ctx context.Context, c *criClient, pods []*floorPod, bound int, t0 time.Time) ([]Timeline, error) {
	dns := hostDNS("/etc/resolv.conf")
	var sem chan struct{}
	if bound > 0 {
		sem = make(chan struct{}, bound)
	}
	tls := make([]Timeline, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// No sources and no admission: those stages are zero.
			tls[i] = Timeline{Pod: p.ref(), UID: p.uid, Written: t0, Desired: t0, Admitted: t0}
			errs[i] = func() error {
				if err := p.prepare(); err != nil {
					return err
				}
				sb := p.sandboxConfig(dns)
				if sem != nil {
					select {
					case sem <- struct{}{}:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				r, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sb})
				if sem != nil {
					<-sem
				}
				if err != nil {
					return fmt.Errorf("RunPodSandbox %s: %w", p.ref(), err)
				}
				p.sandboxID = r.PodSandboxId
				tls[i].SandboxReady = time.Now()
				cr, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
					PodSandboxId: p.sandboxID, Config: p.containerConfig(), SandboxConfig: sb})
				if err != nil {
					return fmt.Errorf("CreateContainer %s: %w", p.ref(), err)
				}
				p.ctrID = cr.ContainerId
				if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.ctrID}); err != nil {
					return fmt.Errorf("StartContainer %s: %w", p.ref(), err)
				}
				tls[i].Started = time.Now()
				return nil
			}()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return tls, err
		}
	}
	return tls, nil
}

// floorStop tears the pods down as the kubelet kills a pod: the container
// with its grace period (sleep as PID 1 ignores SIGTERM, so it takes the
// whole grace), then the sandbox is stopped and removed.
func floorStop(ctx context.Context, c *criClient, pods []*floorPod) error {
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		if p.sandboxID == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p.ctrID != "" {
				if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.ctrID, Timeout: graceSeconds}); err != nil {
					errs[i] = fmt.Errorf("StopContainer %s: %w", p.ref(), err)
					return
				}
			}
			if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.sandboxID}); err != nil {
				errs[i] = fmt.Errorf("StopPodSandbox %s: %w", p.ref(), err)
				return
			}
			if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.sandboxID}); err != nil {
				errs[i] = fmt.Errorf("RemovePodSandbox %s: %w", p.ref(), err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// runFloor is one floor round: the same pods as nodelet's, straight
// through CRI with the same sandbox bound, then torn down.
func (b *bencher) runFloor(ctx context.Context, bound, n, round int) (run Run) {
	run = Run{Contender: Floor, Bound: bound, N: n, Round: round}
	run.Leftovers = b.cleanBefore(ctx)
	defer func() { b.report(&run) }()
	dir := filepath.Join(b.work, fmt.Sprintf("floor-b%d-n%d-r%d", bound, n, round))
	defer os.RemoveAll(dir)
	var pods []*floorPod
	want := map[string]bool{}
	for _, name := range podNames(n) {
		p := &floorPod{name: name + "-" + NodeName, uid: string(uuid.NewUUID())}
		p.dir = filepath.Join(dir, p.uid)
		pods = append(pods, p)
		want[p.ref()] = true
	}
	bctx, cancel := context.WithTimeout(ctx, b.o.timeoutFor(run.N))
	defer cancel()
	run.Load = LoadAvg()
	rt0 := b.runtimeCPU()
	// The same observer as nodelet's rounds, so both carry its load.
	type polled struct {
		ids map[string]string
		err error
	}
	observed := make(chan polled, 1)
	t0 := time.Now()
	go func() {
		ids, err := b.cri.waitRunning(bctx, want)
		observed <- polled{ids, err}
	}()
	tls, err := floorStart(bctx, b.cri, pods, bound, t0)
	if err != nil {
		cancel()
		<-observed
		run.Error = err.Error()
	} else {
		o := <-observed
		run.Runtime = &RuntimeCost{CPU: Dur(b.runtimeCPU() - rt0)}
		if o.err != nil {
			run.Error = o.err.Error()
		} else if started, err := b.cri.startedAt(ctx, o.ids); err != nil {
			run.Error = err.Error()
		} else {
			for i := range tls {
				at := started[tls[i].Pod]
				tls[i].Running, tls[i].Measured = at, at
				run.Running = append(run.Running, Dur(at.Sub(t0)))
			}
			run.Timelines = tls
			run.WallRunning = Dur(Max(durs(run.Running)))
			bd := ComputeBreakdown(tls, b.o.Tolerance)
			run.Breakdown = &bd
		}
	}
	b.teardown(ctx, &run, func(ctx context.Context) error { return floorStop(ctx, b.cri, pods) })
	return run
}

// teardown times remove and the wait until no container or sandbox of the
// bench is left, bounded by -timeout; the first error goes to run.Error.
func (b *bencher) teardown(ctx context.Context, run *Run, remove func(context.Context) error) {
	tctx, cancel := context.WithTimeout(ctx, b.o.timeoutFor(run.N))
	defer cancel()
	t1 := time.Now()
	if err := remove(tctx); err != nil && run.Error == "" {
		run.Error = "teardown: " + err.Error()
	}
	if err := b.cri.waitGone(tctx); err != nil && run.Error == "" {
		run.Error = "teardown: " + err.Error()
	}
	run.Teardown = Dur(time.Since(t1))
}
