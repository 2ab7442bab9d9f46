package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// kubeletConfig is a standalone kubelet (no API server) on the bench's
// containerd: static pods only, everything served on loopback. (Rendered
// by hand: k8s.io/kubelet's config types pull in modules the build does
// not otherwise need.)
func kubeletConfig(staticDir, endpoint string, readOnlyPort, port int32) []byte {
	return []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
port: %d
readOnlyPort: %d
healthzPort: 0
resolvConf: /etc/resolv.conf
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, staticDir, endpoint, port, readOnlyPort))
}

func freePort() (int32, error) {
	a, err := freeLoopbackAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	n, err := strconv.Atoi(p)
	return int32(n), err
}

// readOnlyPods reads an agent's read-only /pods (the kubelet's, or
// nodelet's with the same API).
func readOnlyPods(addr string) podLister {
	return func(ctx context.Context) (*corev1.PodList, error) { return kubeletPods(ctx, addr) }
}

// kubeletPods reads the kubelet's read-only /pods.
func kubeletPods(ctx context.Context, addr string) (*corev1.PodList, error) {
	var l corev1.PodList
	err := readOnlyGet(ctx, addr, "/pods", func(r io.Reader) error { return json.NewDecoder(r).Decode(&l) })
	return &l, err
}

// readOnlyGet GETs path from an agent's read-only port and hands read the
// body of a 200 answer.
func readOnlyGet(ctx context.Context, addr, path string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return read(resp.Body)
}

// runKubelet is one round of a real kubelet (KUBELET_BIN) with the same
// static pods. The kubelet has no sandbox bound; Ready is polled from its
// read-only API every pollEvery.
func (b *bencher) runKubelet(ctx context.Context, n, round int, idle time.Duration) (run Run) {
	run = Run{Contender: Kubelet, Bound: 0, N: n, Round: round}
	run.Leftovers = b.cleanBefore(ctx)
	defer func() { b.report(&run) }()
	dir := filepath.Join(b.work, fmt.Sprintf("kubelet-n%d-r%d", n, round))
	staticDir, stageDir := filepath.Join(dir, "manifests"), filepath.Join(dir, "staging")
	for _, d := range []string{staticDir, stageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	ro, err1 := freePort()
	port, err2 := freePort()
	if err1 != nil || err2 != nil {
		run.Error = fmt.Sprint("free ports: ", err1, err2)
		return run
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), kubeletConfig(staticDir, b.rt.Endpoint, ro, port), 0o644); err != nil {
		run.Error = err.Error()
		return run
	}
	logPath := filepath.Join(dir, "kubelet.log")
	logf, err := os.Create(logPath)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer logf.Close()
	cmd := exec.Command(b.o.KubeletBin, "--config", filepath.Join(dir, "kubelet.yaml"), "--root-dir", filepath.Join(dir, "root"),
		"--cert-dir", filepath.Join(dir, "pki"), "--hostname-override", NodeName)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		run.Error = err.Error()
		return run
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// The kubelet leaves its root dir (made a shared mount point) and
		// its pods' volumes mounted.
		if err := unmountUnder(dir); err != nil {
			b.log.Warn("Cannot unmount what the kubelet left", "dir", dir, "err", err)
		}
		if run.Error != "" {
			run.Error += " (kubelet log: " + logPath + ")"
		} else if !b.o.KeepWorkDir {
			_ = os.RemoveAll(dir)
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", ro)
	// kubeletGone is the kubelet's own word when it exits: the last lines
	// of its log.
	kubeletGone := func(err error) string {
		exited <- err
		return fmt.Sprintf("kubelet exited (%v):\n%s", err, tailFile(logPath, 15))
	}
	// wait is d unless the kubelet exits or the bench is stopped first:
	// then the run's error says which.
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case err := <-exited:
			run.Error = kubeletGone(err)
		case <-ctx.Done():
			run.Error = ctx.Err().Error()
		}
		return false
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := kubeletPods(ctx, addr); err == nil {
			break
		}
		if !wait(200 * time.Millisecond) {
			return run
		}
		if time.Now().After(deadline) {
			run.Error = "kubelet's read-only API did not answer within 2m"
			return run
		}
	}
	if !wait(b.o.Settle) {
		return run
	}
	if idle > 0 {
		run.Empty = emptyCost(map[string]int{"kubelet": cmd.Process.Pid})
	}

	nd := &node{staticDir: staticDir, stageDir: stageDir}
	names := podNames(n)
	if err := nd.stage(names, fmt.Sprintf("kubelet-%d-%d-%d", n, round, time.Now().UnixNano())); err != nil {
		run.Error = err.Error()
		return run
	}
	want := map[string]bool{}
	for _, name := range names {
		want[Namespace+"/"+name+"-"+NodeName] = true
	}
	run.Load = LoadAvg()
	rt0 := b.runtimeCPU()
	cpu0, _ := ReadCPU(cmd.Process.Pid)
	sampler := sampleRSS(ctx, []int{cmd.Process.Pid}, 200*time.Millisecond)
	bctx, cancel := context.WithTimeout(ctx, b.o.timeoutFor(run.N))
	defer cancel()
	t0 := time.Now()
	err = nd.publish(names)
	ready := map[string]time.Time{}
	for err == nil && len(ready) < len(want) {
		var l *corev1.PodList
		if l, err = kubeletPods(bctx, addr); err != nil {
			break
		}
		at := time.Now()
		for i := range l.Items {
			p := &l.Items[i]
			ref := p.Namespace + "/" + p.Name
			if _, ok := ready[ref]; !ok && want[ref] && runningReady(&p.Status) {
				ready[ref] = at
			}
		}
		select {
		case <-bctx.Done():
			err = fmt.Errorf("%d of %d pods Ready: %w", len(ready), len(want), bctx.Err())
		case e := <-exited:
			err = errors.New(kubeletGone(e))
		case <-time.After(pollEvery):
		}
	}
	var ids map[string]string
	if err == nil {
		ids, err = b.cri.waitRunning(bctx, want)
	}
	peak := sampler.Stop()
	if err == nil {
		cpu1, _ := ReadCPU(cmd.Process.Pid)
		run.Agent = &AgentCost{CPU: Dur(cpu1.Total() - cpu0.Total()), PeakRSS: peak, CPUByProcess: map[string]Dur{"kubelet": Dur(cpu1.Total() - cpu0.Total())}}
		run.Runtime = &RuntimeCost{CPU: Dur(b.runtimeCPU() - rt0)}
		// The coverage step, after the costs were taken.
		run.MetricFamilies, err = metricFamilies(bctx, addr)
		var started map[string]time.Time
		if started, err = b.cri.startedAt(ctx, ids); err == nil {
			for pod := range want {
				run.Running = append(run.Running, Dur(started[pod].Sub(t0)))
				run.Ready = append(run.Ready, Dur(ready[pod].Sub(t0)))
			}
			run.WallRunning, run.WallReady = Dur(Max(durs(run.Running))), Dur(Max(durs(run.Ready)))
		}
	}
	pids := map[string]int{"kubelet": cmd.Process.Pid}
	if err == nil && idle > 0 {
		c0, _ := ReadCPU(cmd.Process.Pid)
		select {
		case <-time.After(idle):
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			c1, _ := ReadCPU(cmd.Process.Pid)
			run.Idle = idleCost(n, idle, c1.Total()-c0.Total(), pids)
		}
	}
	if err == nil {
		run.Summary, err = measureSummary(ctx, addr, b.o.SummaryRequests, want, cpuOfFunc([]int{cmd.Process.Pid}), b.runtimeCPU)
	}
	if err == nil {
		run.ExitToStatus, err = b.measureExits(ctx, readOnlyPods(addr), ids)
	}
	if err != nil {
		run.Error = err.Error()
	}
	b.teardown(ctx, &run, func(context.Context) error { return nd.remove(names) })
	return run
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].Mountpoint) > len(ms[j].Mountpoint) })
	var errs []error
	for _, m := range ms {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}
