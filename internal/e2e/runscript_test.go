package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
)

// runScriptSocket is the containerd socket of deploy/nodelet.yaml, the one
// scripts/run.sh's node starts and uses.
const runScriptSocket = "/run/nodelet/containerd/containerd.sock"

// TestRunScript runs README's first command, scripts/run.sh, as written
// (only the state and manifest dirs and the ports are moved aside through
// NODELET_* variables) and checks that the example pods of deploy/examples
// run in containerd as `ctr -n k8s.io tasks ls` shows them and are Running
// on /pods. It removes the examples again before stopping the node.
func TestRunScript(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Fatalf("ctr not installed (scripts/setup.sh installs containerd): %v", err)
	}
	if conn, err := containerd.Dial("unix://" + runScriptSocket); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, verr := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		conn.Close()
		if verr == nil {
			t.Skipf("a containerd already serves %s (a node of scripts/run.sh is running); not disturbing it", runScriptSocket)
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	readOnlyPort := strconv.Itoa(e2e.FreePort(t))
	readOnly := "127.0.0.1:" + readOnlyPort
	const node = "runsh-node"
	cmd := exec.Command("bash", "scripts/run.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"NODELET_NODE_NAME="+node,
		"NODELET_NODE_STATEDIR="+filepath.Join(dir, "state"),
		// The host's /var/lib/kubelet is the kubelets' of other tests
		// (their device plugin registration socket is fixed there).
		"NODELET_NODE_ROOTDIR="+filepath.Join(dir, "root"),
		"NODELET_NODE_PODLOGSDIR="+filepath.Join(dir, "logs"),
		"NODELET_SOURCES_STATICPODPATH="+manifests,
		"NODELET_SOURCES_FILECHECKFREQUENCY=2s",
		fmt.Sprintf("NODELET_BUS_LISTEN=127.0.0.1:%d", e2e.FreePort(t)),
		"NODELET_SERVER_ADDRESS=127.0.0.1",
		"NODELET_SERVER_READONLYPORT="+readOnlyPort,
		fmt.Sprintf("NODELET_SERVER_PORT=%d", e2e.FreePort(t)),
	)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Errorf("scripts/run.sh did not stop within 60s of SIGTERM")
		}
	}
	pods := map[string]string{"web-" + node: "httpd", "ticker-" + node: "tick"}
	t.Cleanup(func() {
		// What the node says of each example (nodelet explain), asked
		// before it stops and logged last: CI shows an output's tail.
		var explained strings.Builder
		if t.Failed() && !stopped {
			fmt.Fprintf(&explained, "%s/pods: %s\n", readOnly, podPhases(readOnlyPods(readOnly)))
			for pod := range pods {
				x := exec.Command(filepath.Join(root, "bin", "nodelet"), "explain", "--config", "deploy/nodelet.yaml", "default/"+pod)
				x.Dir = root
				x.Env = cmd.Env
				b, err := x.CombinedOutput()
				fmt.Fprintf(&explained, "nodelet explain default/%s (%v):\n%s\n", pod, err, b)
			}
		}
		stop()
		if t.Failed() {
			t.Logf("scripts/run.sh output:\n%s", out.String())
			t.Log(explained.String())
		}
	})

	// setup.sh inside run.sh builds the binaries and imports the images:
	// minutes on a cold build cache.
	waitUntil(t, exited, 6*time.Minute, "the example pods Running on /pods", func() bool {
		running := 0
		for _, p := range readOnlyPods(readOnly) {
			if _, ok := pods[p.Name]; ok && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(pods)
	})
	if _, err := os.Stat(filepath.Join(manifests, "web.yaml")); err != nil {
		t.Errorf("run.sh did not install deploy/examples/web.yaml: %v", err)
	}

	conn, err := containerd.Dial("unix://" + runScriptSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ids := map[string]string{} // container ID -> pod
	waitUntil(t, exited, 60*time.Second, "a running container of each example in CRI", func() bool {
		clear(ids)
		for pod, ctr := range pods {
			for _, c := range listContainers(t, rt, pod) {
				if c.Metadata.Name == ctr && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
					ids[c.Id] = pod
				}
			}
		}
		return len(ids) == len(pods)
	})
	tasks, err := exec.Command("ctr", "--address", runScriptSocket, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, tasks)
	}
	for id, pod := range ids {
		if !taskRunning(string(tasks), id) {
			t.Errorf("ctr -n k8s.io tasks ls does not show %s's container %s RUNNING:\n%s", pod, id, tasks)
		}
	}

	// Leave containerd as we found it: the examples go, their containers stop.
	for _, f := range []string{"web.yaml", "ticker.yaml"} {
		if err := os.Remove(filepath.Join(manifests, f)); err != nil {
			t.Error(err)
		}
	}
	waitUntil(t, exited, 90*time.Second, "the examples' containers stopped", func() bool {
		for pod := range pods {
			for _, c := range listContainers(t, rt, pod) {
				if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
					return false
				}
			}
		}
		return true
	})
	removeSandboxes(t, rt, pods)
	stop()
}

// waitUntil polls ok every 500ms, failing when timeout passes or when the
// process behind exited ends first.
func waitUntil(t *testing.T, exited chan error, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("scripts/run.sh exited (%v) while waiting for %s", err, what)
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// podPhases is each pod's phase and its containers' states, in short.
func podPhases(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "%s %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			switch s := c.State; {
			case s.Waiting != nil:
				fmt.Fprintf(&b, " %s=waiting(%s: %s)", c.Name, s.Waiting.Reason, s.Waiting.Message)
			case s.Running != nil:
				fmt.Fprintf(&b, " %s=running", c.Name)
			case s.Terminated != nil:
				fmt.Fprintf(&b, " %s=terminated(%s, %d)", c.Name, s.Terminated.Reason, s.Terminated.ExitCode)
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

func readOnlyPods(addr string) []corev1.Pod {
	resp, err := http.Get("http://" + addr + "/pods")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var l corev1.PodList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return nil
	}
	return l.Items
}

func listContainers(t *testing.T, rt runtimeapi.RuntimeServiceClient, pod string) []*runtimeapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": pod}}})
	if err != nil {
		t.Fatalf("CRI ListContainers: %v", err)
	}
	return resp.Containers
}

// taskRunning reads `ctr tasks ls` (TASK PID STATUS) for id.
func taskRunning(out, id string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == id && f[2] == "RUNNING" {
			return true
		}
	}
	return false
}

// removeSandboxes removes the examples' sandboxes (and so their stopped
// containers) so that nothing of the test stays in containerd.
func removeSandboxes(t *testing.T, rt runtimeapi.RuntimeServiceClient, pods map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for pod := range pods {
		resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.name": pod}}})
		if err != nil {
			t.Errorf("CRI ListPodSandbox: %v", err)
			return
		}
		for _, sb := range resp.Items {
			// nodelet-runtime may be removing it at the same moment.
			if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil && status.Code(err) != codes.NotFound {
				t.Errorf("stop sandbox of %s: %v", pod, err)
			}
			// containerd 1.6 answers a remove racing nodelet-runtime's own
			// with "already in removing state": what counts is that it goes.
			err := retryRemove(ctx, rt, sb.Id)
			if err != nil {
				t.Errorf("remove sandbox of %s: %v", pod, err)
			}
		}
	}
}

// retryRemove removes sandbox id, trying again while another remover is at
// it, until CRI no longer lists it.
func retryRemove(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) error {
	for {
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		if err == nil || status.Code(err) == codes.NotFound {
			return nil
		}
		resp, lerr := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
		if lerr == nil && len(resp.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
