package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/services/common/testenv"
	"github.com/nodelet/nodelet/services/supervisor"
)

// kubectl runs the real kubectl as the cluster admin and returns its stdout,
// stderr and exit code.
func kubectl(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return kubectlEnv(t, nil, stdin, args...)
}

// kubectlEnv is kubectl with extra environment variables.
func kubectlEnv(t testing.TB, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cp.Kubectl, append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func mustKubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errs, code := kubectl(t, stdin, args...)
	if code != 0 {
		t.Fatalf("kubectl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// nodeletCLI runs bin/nodelet against node n.
func nodeletCLI(t testing.TB, n *node, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "nodelet"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nodelet %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

const chattyManifest = `apiVersion: v1
kind: Pod
metadata:
  name: chatty
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: talk
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, "echo hello-standalone; trap 'exit 0' TERM; while true; do sleep 1; done"]
`

// TestStandaloneLogsExec: a node without a control plane is debuggable
// through its own kubelet API with the node-local client certificate.
func TestStandaloneLogsExec(t *testing.T) {
	roPort := freePort(t)
	n := newNode(t, nodeOptions{Server: fmt.Sprintf("  readOnlyPort: %d\n", roPort)})
	n.WriteManifest("chatty.yaml", chattyManifest)
	n.WaitPod("chatty-"+nodeName, 90*time.Second, "Running", runningReady)
	eventually(t, 30*time.Second, "nodelet logs", func() bool {
		out, _, code := nodeletCLI(t, n, "", "logs", "--config", n.Config, "chatty-"+nodeName)
		return code == 0 && out == "hello-standalone\n"
	})
	out, errs, code := nodeletCLI(t, n, "", "exec", "--config", n.Config, "chatty-"+nodeName, "--", "sh", "-c", "echo in-container; exit 3")
	if code != 3 || out != "in-container\n" {
		t.Errorf("nodelet exec: %q exit %d, stderr %q", out, code, errs)
	}
	// Without credentials the same API answers 401.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/pods", n.ServerPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", resp.StatusCode)
	}
	// server.readOnlyPort: the read-only paths over HTTP, nothing else.
	for path, want := range map[string]int{"/pods": 200, "/healthz": 200, "/containerLogs/default/chatty-" + nodeName + "/talk": 404} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", roPort, path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("read-only port %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// serverPod has what the kubelet API tests read: a container that ticks
// (logs -f), one that writes stdout and stderr once, a web server
// (port-forward) and one that fails its first attempt (--previous).
func serverPod(ns string) *corev1.Pod {
	bb := func(name string, script string) corev1.Container {
		return corev1.Container{Name: name, Image: "nodelet.local/busybox:1.35", ImagePullPolicy: corev1.PullNever,
			Command:      []string{"sh", "-c", script},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "srv"},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				bb("app", `trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done`),
				bb("side", `echo side-out; sleep 1; echo side-err >&2; trap 'exit 0' TERM; while true; do sleep 1; done`),
				bb("web", `mkdir -p /tmp/www && echo hello-through-port-forward > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`),
				bb("crash", `n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo attempt-$n; `+
					`if [ $n = 1 ]; then exit 1; fi; trap 'exit 0' TERM; while true; do sleep 1; done`),
			},
		},
	}
}

// TestKubeletAPI drives nodelet-server through kube-apiserver with the real
// kubectl: logs (-f, --tail, --since, --timestamps, --limit-bytes, -c,
// --previous), exec with stdin and exit codes, port-forward, kubectl debug
// (an ephemeral container attached to), the node proxy to /stats/summary,
// and the kubelet's 401 and 403 answered directly.
func TestKubeletAPI(t *testing.T) {
	n := newNode(t, nodeOptions{API: true, ServerAddress: "0.0.0.0",
		Server: "  authentication:\n    x509:\n      clientCAFile: " + cp.ClientCAFile + "\n"})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	eventually(t, 60*time.Second, "node publishes the kubelet endpoint", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && node.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(n.ServerPort)
	})
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, serverPod(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, "pod running with crash restarted once", func() bool {
		p, err := pods.Get(ctx, "srv", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		running := 0
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running == nil || (c.Name == "crash" && c.RestartCount < 1) {
				return false
			}
			running++
		}
		return running == 4
	})

	t.Run("logs", func(t *testing.T) {
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "side"); out != "side-out\nside-err\n" {
			t.Errorf("logs -c side = %q", out)
		}
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "side", "--tail=1"); out != "side-err\n" {
			t.Errorf("logs --tail=1 = %q", out)
		}
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "side", "--limit-bytes=4"); out != "side" {
			t.Errorf("logs --limit-bytes=4 = %q", out)
		}
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "side", "--since=1h"); out != "side-out\nside-err\n" {
			t.Errorf("logs --since=1h = %q", out)
		}
		out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "side", "--timestamps")
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z side-out\n\S+ side-err\n$`).MatchString(out) {
			t.Errorf("logs --timestamps = %q", out)
		}
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "crash", "--previous"); out != "attempt-1\n" {
			t.Errorf("logs --previous = %q", out)
		}
		if out := mustKubectl(t, "", "-n", ns, "logs", "srv", "-c", "crash"); out != "attempt-2\n" {
			t.Errorf("logs (after a restart) = %q", out)
		}
	})

	t.Run("logs -f", func(t *testing.T) {
		fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
		defer fcancel()
		cmd := exec.CommandContext(fctx, cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "logs", "-f", "--tail=1", "srv", "-c", "app")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errb := &testenv.Buffer{}
		cmd.Stderr = errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { fcancel(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(stdout)
		var seen []string
		for len(seen) < 3 && sc.Scan() {
			seen = append(seen, sc.Text())
		}
		if len(seen) < 3 {
			t.Fatalf("logs -f gave %q; stderr %s", seen, errb.String())
		}
		// The first line is the tail; the next ones were written while following.
		var a, b int
		if _, err := fmt.Sscanf(seen[1], "tick-%d", &a); err != nil {
			t.Fatalf("lines %q", seen)
		}
		if _, err := fmt.Sscanf(seen[2], "tick-%d", &b); err != nil || b != a+1 {
			t.Fatalf("lines %q", seen)
		}
	})

	t.Run("exec", func(t *testing.T) {
		if out := mustKubectl(t, "hello-stdin\n", "-n", ns, "exec", "-i", "srv", "-c", "side", "--", "cat"); out != "hello-stdin\n" {
			t.Errorf("exec -i cat = %q", out)
		}
		_, errs, code := kubectl(t, "", "-n", ns, "exec", "srv", "-c", "side", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if code != 3 {
			t.Errorf("exec exit 3: exit %d, stderr %q", code, errs)
		}
		if out := mustKubectl(t, "", "-n", ns, "exec", "srv", "-c", "side", "--", "cat", "/data/n"); out != "2\n" {
			t.Errorf("exec cat /data/n = %q", out)
		}
		// kubectl's older SPDY path, which it falls back to.
		spdy := []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}
		out, errs, code := kubectlEnv(t, spdy, "over-spdy\n", "-n", ns, "exec", "-i", "srv", "-c", "side", "--", "sh", "-c", "cat; exit 4")
		if out != "over-spdy\n" || code != 4 {
			t.Errorf("exec over SPDY: %q exit %d, stderr %q", out, code, errs)
		}
	})

	for _, env := range []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=true", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"} {
		t.Run("port-forward "+env, func(t *testing.T) {
			pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
			defer pcancel()
			cmd := exec.CommandContext(pctx, cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "port-forward", "--address", "127.0.0.1", "pod/srv", ":8080")
			cmd.Env = append(os.Environ(), env)
			// The local address it picked comes on stdout.
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			errb := &testenv.Buffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { pcancel(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(stdout)
			re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`)
			addr := ""
			for addr == "" && sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					addr = m[1]
				}
			}
			if addr == "" {
				t.Fatalf("port-forward printed no address; stderr %s", errb.String())
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				t.Fatalf("GET through port-forward: %v; stderr %s", err, errb.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello-through-port-forward\n" {
				t.Errorf("GET through port-forward = %d %q", resp.StatusCode, body)
			}
		})
	}

	t.Run("stats summary through the node proxy", func(t *testing.T) {
		out := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/stats/summary")
		var sum struct {
			Node struct {
				NodeName string `json:"nodeName"`
			} `json:"node"`
			Pods []struct {
				PodRef struct{ Name, Namespace string } `json:"podRef"`
			} `json:"pods"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Node.NodeName != nodeName {
			t.Fatalf("summary: %v %.300s", err, out)
		}
		found := false
		for _, p := range sum.Pods {
			found = found || (p.PodRef.Namespace == ns && p.PodRef.Name == "srv")
		}
		if !found {
			t.Errorf("summary has no pod %s/srv", ns)
		}
		if out := mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/healthz"); out != "ok" {
			t.Errorf("healthz = %q", out)
		}
		// /metrics/resource as metrics-server scrapes it.
		out = mustKubectl(t, "", "get", "--raw", "/api/v1/nodes/"+nodeName+"/proxy/metrics/resource")
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(out))
		if err != nil {
			t.Fatalf("metrics/resource: %v\n%s", err, out)
		}
		for _, name := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes",
			"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "pod_cpu_usage_seconds_total",
			"pod_memory_working_set_bytes", "container_start_time_seconds", "resource_scrape_error"} {
			if fams[name] == nil {
				t.Errorf("metrics/resource has no %s", name)
			}
		}
		found = false
		for _, m := range fams["container_memory_working_set_bytes"].GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			found = found || (l["namespace"] == ns && l["pod"] == "srv" && l["container"] == "app")
		}
		if !found {
			t.Errorf("no container_memory_working_set_bytes{namespace=%q,pod=\"srv\",container=\"app\"}", ns)
		}
	})

	t.Run("401 and 403", func(t *testing.T) {
		base := fmt.Sprintf("https://127.0.0.1:%d", n.ServerPort)
		get := func(c *http.Client, path, token string) (int, string) {
			req, _ := http.NewRequest("GET", base+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		insecure := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if code, body := get(insecure, "/pods", ""); code != http.StatusUnauthorized || body != "Unauthorized" {
			t.Errorf("no credentials: %d %q", code, body)
		}
		if code, body := get(insecure, "/pods", "not-a-token"); code != http.StatusUnauthorized {
			t.Errorf("bad token: %d %q", code, body)
		}
		// A service account with no role: authenticated, not allowed.
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("Forbidden (user=system:serviceaccount:%s:nobody, verb=get, resource=nodes, subresource(s)=[proxy])\n", ns)
		if code, body := get(insecure, "/containerLogs/"+ns+"/srv/side", tr.Status.Token); code != http.StatusForbidden || body != want {
			t.Errorf("token without nodes/proxy: %d %q, want 403 %q", code, body, want)
		}
		// kube-apiserver's kubelet client certificate (system:masters).
		crt, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.key"))
		if err != nil {
			t.Fatal(err)
		}
		masters := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{crt}}}}
		if code, body := get(masters, "/containerLogs/"+ns+"/srv/side?tailLines=1", ""); code != http.StatusOK || body != "side-err\n" {
			t.Errorf("system:masters certificate: %d %q", code, body)
		}
		if code, body := get(masters, "/containerLogs/"+ns+"/nope/side", ""); code != http.StatusNotFound || body != `pod "nope" does not exist` {
			t.Errorf("unknown pod: %d %q", code, body)
		}
		if code, body := get(masters, "/containerLogs/"+ns+"/srv/nope", ""); code != http.StatusNotFound || body != `container "nope" not found in pod "srv"` {
			t.Errorf("unknown container: %d %q", code, body)
		}
		if code, body := get(masters, "/containerLogs/"+ns+"/srv/side?tailLines=x", ""); code != http.StatusBadRequest {
			t.Errorf("bad query: %d %q", code, body)
		}
	})

	t.Run("nodelet logs and exec", func(t *testing.T) {
		out, errs, code := nodeletCLI(t, n, "", "logs", "--config", n.Config, "-n", ns, "srv", "-c", "side")
		if code != 0 || out != "side-out\nside-err\n" {
			t.Errorf("nodelet logs: %q exit %d, stderr %q", out, code, errs)
		}
		out, errs, code = nodeletCLI(t, n, "via-cli\n", "exec", "--config", n.Config, "-i", ns+"/srv", "-c", "side", "--", "sh", "-c", "cat; exit 5")
		if code != 5 || out != "via-cli\n" {
			t.Errorf("nodelet exec: %q exit %d, stderr %q", out, code, errs)
		}
		// With a TTY (the WebSocket stream translated to the runtime's SPDY).
		out, errs, code = nodeletCLI(t, n, "", "exec", "--config", n.Config, "-t", ns+"/srv", "-c", "side", "--", "tty")
		if code != 0 || !strings.HasPrefix(out, "/dev/pts/") {
			t.Errorf("nodelet exec -t tty: %q exit %d, stderr %q", out, code, errs)
		}
	})

	t.Run("cp and attach", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(src, []byte("copied-through-exec\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustKubectl(t, "", "-n", ns, "cp", src, "srv:/tmp/in.txt", "-c", "side")
		if out := mustKubectl(t, "", "-n", ns, "exec", "srv", "-c", "side", "--", "cat", "/tmp/in.txt"); out != "copied-through-exec\n" {
			t.Errorf("after kubectl cp in: %q", out)
		}
		dst := filepath.Join(dir, "out.txt")
		mustKubectl(t, "", "-n", ns, "cp", "srv:/tmp/in.txt", dst, "-c", "side")
		if b, err := os.ReadFile(dst); err != nil || string(b) != "copied-through-exec\n" {
			t.Errorf("after kubectl cp out: %q %v", b, err)
		}
		// attach to the ticking container: its output arrives live.
		actx, acancel := context.WithTimeout(ctx, 60*time.Second)
		defer acancel()
		cmd := exec.CommandContext(actx, cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "attach", "srv", "-c", "app")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errb := &testenv.Buffer{}
		cmd.Stderr = errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { acancel(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(stdout)
		got := ""
		for got == "" && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "tick-") {
				got = sc.Text()
			}
		}
		if got == "" {
			t.Fatalf("kubectl attach gave no tick; stderr %s", errb.String())
		}
	})

	// kubectl debug -i: an ephemeral container added through the
	// pods/ephemeralcontainers subresource, started in the running pod in
	// the target's PID namespace, attached to through nodelet-server (its
	// stdin is the test's), and reported in ephemeralContainerStatuses.
	t.Run("kubectl debug", func(t *testing.T) {
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
		eventually(t, 60*time.Second, "the ephemeral container in ephemeralContainerStatuses", func() bool {
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
	})

	t.Run("server SIGKILLed during logs -f", func(t *testing.T) {
		before := n.WaitReady()
		restarts := func() map[string]int32 {
			p, err := pods.Get(ctx, "srv", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]int32{}
			for _, c := range p.Status.ContainerStatuses {
				m[c.Name] = c.RestartCount
			}
			return m
		}
		podRestarts := restarts()
		fctx, fcancel := context.WithTimeout(ctx, 90*time.Second)
		defer fcancel()
		cmd := exec.CommandContext(fctx, cp.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "logs", "-f", "--tail=1", "srv", "-c", "app")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() {
			t.Fatal("logs -f gave nothing")
		}
		if before["server"].PID <= 0 {
			t.Fatalf("no nodelet-server pid: %+v", before)
		}
		if err := syscall.Kill(before["server"].PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
		}
		_ = cmd.Wait()
		if fctx.Err() != nil {
			t.Fatal("kubectl logs -f did not end when nodelet-server was killed")
		}
		eventually(t, 60*time.Second, "nodelet-server back", func() bool {
			st, err := supervisor.ReadState(n.StateDir)
			if err != nil {
				return false
			}
			for _, p := range st {
				if p.Name == "server" {
					return p.PID != before["server"].PID && p.State == "ready"
				}
			}
			return false
		})
		eventually(t, 30*time.Second, "kubectl logs works again", func() bool {
			out, _, code := kubectl(t, "", "-n", ns, "logs", "srv", "-c", "side", "--tail=1")
			return code == 0 && out == "side-err\n"
		})
		after := n.WaitReady()
		for name, p := range before {
			if name != "server" && after[name].PID != p.PID {
				t.Errorf("%s restarted (pid %d → %d)", name, p.PID, after[name].PID)
			}
		}
		if now := restarts(); !reflect.DeepEqual(now, podRestarts) {
			t.Errorf("container restarts %v → %v", podRestarts, now)
		}
	})
}
