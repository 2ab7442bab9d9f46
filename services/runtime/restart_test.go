package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// runtimeBinary is nodelet-runtime, built once per test binary.
func runtimeBinary(t *testing.T) string { return testenv.MustDaemonBinary(t, "runtime") }

// daemonProcess is nodelet-runtime running as its own process.
type daemonProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (h *harness) startProcess(t *testing.T, n int) *daemonProcess {
	t.Helper()
	return h.startProcessWith(t, n)
}

// startProcessWith starts nodelet-runtime with extra environment
// variables (NAME=value).
func (h *harness) startProcessWith(t *testing.T, n int, env ...string) *daemonProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("runtime-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(runtimeBinary(t), "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = f, f
	cfg := h.cfg
	cmd.Env = append(os.Environ(),
		"NODELET_NODE_NAME="+cfg.Node.Name,
		// The credentials are in the bus's state dir.
		"NODELET_NODE_STATEDIR="+h.bus.StateDir,
		"NODELET_NODE_PODLOGSDIR="+cfg.Node.PodLogsDir,
		"NODELET_BUS_LISTEN="+h.bus.Server.Addr(),
		"NODELET_RUNTIME_ENDPOINT="+cfg.Runtime.Endpoint,
		"NODELET_RUNTIME_CNICONFDIR="+cfg.Runtime.CNIConfDir,
		"NODELET_RUNTIME_CNIBINDIRS="+strings.Join(cfg.Runtime.CNIBinDirs, ","),
		"NODELET_RUNTIME_MANAGECNICONFIG=false",
		"NODELET_RUNTIME_CGROUPROOT="+cfg.Runtime.CgroupRoot,
		"NODELET_RUNTIME_RELISTPERIOD=500ms",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProcess{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s:\n%s", logPath, tail(string(b), 60))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SIGKILL nodelet-runtime while it creates 10 pods, then start it again:
// every pod runs, with exactly one sandbox and one container each, and
// the containers that ran before the kill keep their IDs and restart
// counts.
func TestSIGKILLMidBurst(t *testing.T) {
	h := newHarness(t, harnessOptions{noStart: true})
	h.setSourcesReady()
	p1 := h.startProcess(t, 1)

	var pods []*corev1.Pod
	grace := int64(1)
	for i := range 10 {
		pod := newPod(fmt.Sprintf("burst-%d", i), busybox("app", "exec sleep 3600"))
		pod.Spec.TerminationGracePeriodSeconds = &grace
		pods = append(pods, pod)
	}
	began := time.Now()
	for _, pod := range pods {
		h.run(pod)
	}
	// Kill it in the middle: some containers run, not all.
	runningNow := func() map[string]*runtimeapi.Container {
		resp, err := h.cri.Runtime.ListContainers(h.ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{LabelManaged: "true"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*runtimeapi.Container{}
		for _, c := range resp.Containers {
			out[c.Labels[labelPodUID]] = c
		}
		return out
	}
	var before map[string]*runtimeapi.Container
	waitFor(t, 2*time.Minute, "a few containers running", func() (bool, string) {
		before = runningNow()
		return len(before) >= 2, fmt.Sprintf("%d running", len(before))
	})
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.done
	before = runningNow()
	t.Logf("killed nodelet-runtime %v into the burst with %d of 10 containers running", time.Since(began).Round(time.Millisecond), len(before))
	if len(before) == 10 {
		t.Log("every container was already running when the kill landed")
	}

	restarted := time.Now()
	h.startProcess(t, 2)
	for _, pod := range pods {
		h.waitObserved(pod, 3*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	}
	t.Logf("all 10 running %v after the restart (%v after the burst began)", time.Since(restarted).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	// A wrong implementation has made its duplicates by the time a pod put
	// after them runs.
	h.barrier()
	for _, pod := range pods {
		sbs := h.sandboxes(pod.UID)
		cs := h.containers(pod.UID)
		if len(sbs) != 1 || len(cs) != 1 {
			t.Errorf("pod %s: %d sandboxes, %d containers; want one each", pod.Name, len(sbs), len(cs))
			for _, c := range cs {
				st, err := h.cri.Runtime.ContainerStatus(h.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
				if err == nil {
					s := st.Status
					t.Logf("  container %.12s %s exit=%d reason=%q message=%q started=%d", c.Id, s.State, s.ExitCode, s.Reason, s.Message, s.StartedAt)
				}
			}
			continue
		}
		if prev, ok := before[string(pod.UID)]; ok {
			if cs[0].Id != prev.Id || cs[0].Annotations[annotationRestartCount] != prev.Annotations[annotationRestartCount] {
				t.Errorf("pod %s: container %s (restarts %s) became %s (restarts %s)", pod.Name,
					prev.Id, prev.Annotations[annotationRestartCount], cs[0].Id, cs[0].Annotations[annotationRestartCount])
			}
		}
		if o := h.obs.get(pod.UID); container(o, "app").RestartCount != 0 {
			t.Errorf("pod %s restarted: %s", pod.Name, describe(o))
		}
	}
}

// A burst of 10 pods with and without the limit on concurrent sandbox
// creations (runtime.maxConcurrentSandboxCreations): every pod runs with
// one sandbox either way; the times are logged for comparison.
func TestBurstOfTenPods(t *testing.T) {
	for _, limit := range []int{2, 0} {
		t.Run(fmt.Sprintf("maxConcurrentSandboxCreations=%d", limit), func(t *testing.T) {
			h := newHarness(t, harnessOptions{configure: func(c *config.Config) { c.Runtime.MaxConcurrentSandboxCreations = limit }})
			var pods []*corev1.Pod
			grace := int64(1)
			for i := range 10 {
				pod := newPod(fmt.Sprintf("burst-%d", i), busybox("app", "exec sleep 3600"))
				pod.Spec.TerminationGracePeriodSeconds = &grace
				pods = append(pods, pod)
			}
			began := time.Now()
			for _, pod := range pods {
				h.run(pod)
			}
			for _, pod := range pods {
				h.waitObserved(pod, 3*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
			}
			t.Logf("10 pods running %v after they were admitted (maxConcurrentSandboxCreations=%d)", time.Since(began).Round(time.Millisecond), limit)
			for _, pod := range pods {
				if n := len(h.sandboxes(pod.UID)); n != 1 {
					t.Errorf("pod %s: %d sandboxes", pod.Name, n)
				}
			}
		})
	}
}
