package e2e_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// kubectlDebug runs kubectl debug -i against the pod srv of TestKubeletAPI:
// an ephemeral container added through the pods/ephemeralcontainers
// subresource, started in the running pod in the target's PID namespace,
// attached to through nodelet-server (its stdin is the test's), and
// reported in ephemeralContainerStatuses.
func kubectlDebug(t *testing.T, ctx context.Context, ns string, pods corev1client.PodInterface) {
	// stdin stays open while the session runs: closing it ends an
	// attach to a container without stdinOnce (containerd's attach,
	// as with the kubelet).
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	defer dcancel()
	cmd := exec.CommandContext(dctx, cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "debug", "srv", "-i",
		"--image=nodelet.local/busybox:1.35", "--image-pull-policy=Never", "--target=app", "-c", "dbg", "--", "sh")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &testenv.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { dcancel(); _ = cmd.Wait() }()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The first command may be written before the attach is up; it
	// is repeated until its answer arrives.
	var out []string
	got := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for !got {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl debug ended: %v; stderr %s", out, errb.String())
			}
			out = append(out, l)
			got = l == "debug-42"
		case <-tick.C:
			_, _ = io.WriteString(stdin, "ps -o args; echo debug-$((40+2))\n")
		case <-dctx.Done():
			t.Fatalf("no answer through kubectl debug: %v; stderr %s", out, errb.String())
		}
	}
	// --target: the app container's processes are the debugger's to see.
	if !strings.Contains(strings.Join(out, "\n"), "tick-$i") {
		t.Errorf("kubectl debug --target=app: ps shows no process of app: %q", out)
	}
	_, _ = io.WriteString(stdin, "exit 0\n")
	_ = stdin.Close()
	eventually.True(t, 60*time.Second, "the ephemeral container in ephemeralContainerStatuses", func() bool {
		p, err := pods.Get(ctx, "srv", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, es := range p.Status.EphemeralContainerStatuses {
			if es.Name == "dbg" && es.ContainerID != "" && es.State.Terminated != nil && es.State.Terminated.ExitCode == 0 {
				return true
			}
		}
		return false
	})
}
