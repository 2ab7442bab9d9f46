package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

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
	n := e2e.NewNode(t, e2e.NodeOptions{})
	n.WriteManifest("chatty.yaml", chattyManifest)
	n.WaitPod("chatty-"+nodeName, 90*time.Second, "Running", e2e.RunningReady)
	eventually.True(t, 30*time.Second, "nodelet logs", func() bool {
		out, _, code := nodeletCLI(t, n, "", "logs", "--config", n.Config, "chatty-"+nodeName)
		return code == 0 && out == "hello-standalone\n"
	})
	out, errs, code := nodeletCLI(t, n, "", "exec", "--config", n.Config, "chatty-"+nodeName, "--", "sh", "-c", "echo in-container; exit 3")
	if code != 3 || out != "in-container\n" {
		t.Errorf("nodelet exec: %q exit %d, stderr %q", out, code, errs)
	}
	// Without credentials the same API answers 401.
	if code, body := httpsGet(t, insecureClient(), fmt.Sprintf("https://127.0.0.1:%d/pods", n.ServerPort), ""); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d %q", code, body)
	}
	// server.readOnlyPort: the read-only paths over HTTP, nothing else.
	for path, want := range map[string]int{"/pods": 200, "/healthz": 200, "/metrics/cadvisor": 200,
		"/containerLogs/default/chatty-" + nodeName + "/talk": 404, "/runningpods/": 404} {
		if code, body := httpsGet(t, http.DefaultClient, "http://"+n.ReadOnly+path, ""); code != want {
			t.Errorf("read-only port %s: %d, want %d: %.200s", path, code, want, body)
		}
	}
}

// serverPod has what the kubelet API tests read: a container that ticks
// (logs -f), one that writes stdout and stderr once, a web server with a
// readiness probe (port-forward, /metrics/probes) and one that fails its
// first attempt (--previous).
func serverPod(ns string) *corev1.Pod {
	bb := func(name string, script string) corev1.Container {
		return corev1.Container{Name: name, Image: "nodelet.local/busybox:1.35", ImagePullPolicy: corev1.PullNever,
			Command:      []string{"sh", "-c", script},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	}
	web := bb("web", `mkdir -p /tmp/www && echo hello-through-port-forward > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`)
	web.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}}
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
				web,
				bb("crash", `n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo attempt-$n; `+
					`if [ $n = 1 ]; then exit 1; fi; trap 'exit 0' TERM; while true; do sleep 1; done`),
			},
		},
	}
}

// TestKubeletAPI drives nodelet-server through kube-apiserver with the real
// kubectl: logs (-f, --tail, --since, --timestamps, --limit-bytes, -c,
// --previous), exec with stdin, with a TTY and exit codes, attach, cp,
// kubectl debug (an ephemeral container attached to), port-forward, the
// node proxy to /stats/summary and the metrics paths, the kubelet's 401 and
// 403 answered directly, the read-only port off, and nodelet-server
// SIGKILLed during logs -f.
func TestKubeletAPI(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{API: true, ServerAddress: "0.0.0.0", NoReadOnlyPort: true,
		Server: "  authentication:\n    x509:\n      clientCAFile: " + cp.ClientCAFile + "\n"})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	eventually.True(t, 60*time.Second, "node publishes the kubelet endpoint", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && node.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(n.ServerPort)
	})
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, serverPod(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 120*time.Second, "pod running with crash restarted once", func() bool {
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

	t.Run("read-only port off unless configured", func(t *testing.T) {
		pid := n.WaitReady()["server"].PID
		want := []int{n.ServerPort, n.HealthzPort}
		slices.Sort(want)
		if ports := listeningTCPPorts(t, pid); !reflect.DeepEqual(ports, want) {
			t.Errorf("nodelet-server listens on %v, want only server.port %d and server.healthzPort %d (server.readOnlyPort defaults to 0)", ports, n.ServerPort, n.HealthzPort)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.HealthzPort))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Errorf("the kubelet's healthz (server.healthzPort) = %d %q, want 200 ok", resp.StatusCode, body)
		}
	})

	t.Run("logs", func(t *testing.T) {
		// side writes its stderr line a second after its stdout line: the
		// pod can be Running with every container up before that.
		eventually.True(t, 30*time.Second, "side's second line logged", func() bool {
			out, _, code := kubectl(t, "", "-n", ns, "logs", "srv", "-c", "side")
			return code == 0 && strings.Contains(out, "side-err")
		})
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
		sc, errb, _ := kubectlStream(t, fctx, nil, "-n", ns, "logs", "-f", "--tail=1", "srv", "-c", "app")
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

	// kubectl exec -it needs a terminal: it runs under a pseudo-terminal
	// of the test's, sized 33x111 and then resized to 44x122.
	for _, env := range []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"} {
		t.Run("exec -it "+env, func(t *testing.T) {
			cmd := exec.Command(cp.Kubectl, kubectlArgs("-n", ns, "exec", "-it", "srv", "-c", "side", "--", "sh")...)
			cmd.Env = append(os.Environ(), env)
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 111})
			if err != nil {
				t.Fatal(err)
			}
			defer ptmx.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-done
				}
			}()
			out := &testenv.Buffer{}
			go func() { _, _ = io.Copy(out, ptmx) }()
			expect := func(what string, re *regexp.Regexp) {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for !re.MatchString(out.String()) {
					if time.Now().After(deadline) {
						t.Fatalf("no %s in the terminal: %q", what, out.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			type_ := func(s string) {
				if _, err := io.WriteString(ptmx, s); err != nil {
					t.Fatal(err)
				}
			}
			// The container's stdin is a terminal, of the size kubectl
			// sent when it started.
			type_("tty; stty size\n")
			expect("tty and size 33 111", regexp.MustCompile(`(?s)/dev/pts/\d+\r?\n33 111\r?\n`))
			// A resize of kubectl's terminal reaches the container's.
			if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 44, Cols: 122}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(out.String(), "44 122") && time.Now().Before(deadline) {
				type_("stty size\n")
				time.Sleep(300 * time.Millisecond)
			}
			expect("size 44 122 after the resize", regexp.MustCompile(`\n44 122\r?\n`))
			type_("exit 7\n")
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("kubectl exec -it did not end after exit 7: %q", out.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 7 {
				t.Errorf("kubectl exec -it ... exit 7: exit %d; terminal %q", code, out.String())
			}
		})
	}

	for _, env := range []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=true", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"} {
		t.Run("port-forward "+env, func(t *testing.T) {
			pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
			defer pcancel()
			// The local address it picked comes on stdout.
			sc, errb, _ := kubectlStream(t, pctx, []string{env}, "-n", ns, "port-forward", "--address", "127.0.0.1", "pod/srv", ":8080")
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
			go func() {
				for sc.Scan() {
				}
			}()
			code, body := httpsGet(t, http.DefaultClient, "http://"+addr+"/", "")
			if code != http.StatusOK || body != "hello-through-port-forward\n" {
				t.Errorf("GET through port-forward = %d %q; stderr %s", code, body, errb.String())
			}
		})
	}

	t.Run("stats and metrics through the node proxy", func(t *testing.T) {
		proxy := "/api/v1/nodes/" + nodeName + "/proxy"
		out := mustKubectl(t, "", "get", "--raw", proxy+"/stats/summary")
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
		if out := mustKubectl(t, "", "get", "--raw", proxy+"/healthz"); out != "ok" {
			t.Errorf("healthz = %q", out)
		}
		app := map[string]string{"namespace": ns, "pod": "srv", "container": "app"}
		// /metrics/resource as metrics-server scrapes it.
		fams := parseMetrics(t, mustKubectl(t, "", "get", "--raw", proxy+"/metrics/resource"))
		for _, name := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes",
			"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "pod_cpu_usage_seconds_total",
			"pod_memory_working_set_bytes", "container_start_time_seconds", "resource_scrape_error"} {
			if fams[name] == nil {
				t.Errorf("metrics/resource has no %s", name)
			}
		}
		if !hasSeries(fams, "container_memory_working_set_bytes", app) {
			t.Errorf("metrics/resource: no container_memory_working_set_bytes%v", app)
		}
		// /metrics/cadvisor: cAdvisor's names with the kubelet's labels.
		fams = parseMetrics(t, mustKubectl(t, "", "get", "--raw", proxy+"/metrics/cadvisor"))
		for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_fs_usage_bytes"} {
			if !hasSeries(fams, name, app) {
				t.Errorf("metrics/cadvisor: no %s%v", name, app)
			}
		}
		// /metrics/probes: the web container's readiness probe, counted by
		// nodelet-prober, under the kubelet's name and labels.
		probe := map[string]string{"probe_type": "Readiness", "result": "successful", "container": "web", "pod": "srv", "namespace": ns}
		eventually.True(t, 30*time.Second, "prober_probe_total of the web container", func() bool {
			out, _, code := kubectl(t, "", "get", "--raw", proxy+"/metrics/probes")
			return code == 0 && hasSeries(parseMetrics(t, out), "prober_probe_total", probe)
		})
		// /metrics: every daemon's nodelet_* metrics and the kubelet's
		// families (kubeletmetrics.Required) beside them.
		fams = parseMetrics(t, mustKubectl(t, "", "get", "--raw", proxy+"/metrics"))
		for _, name := range append([]string{"nodelet_running_pods", "nodelet_prober_probe_total", "go_goroutines"}, kubeletmetrics.Required...) {
			if fams[name] == nil {
				t.Errorf("metrics has no %s", name)
			}
		}
		if !hasSeries(fams, "kubelet_running_containers", map[string]string{"container_state": "running"}) ||
			!hasSeries(fams, "kubelet_node_name", map[string]string{"node": nodeName}) ||
			!hasSeries(fams, "storage_operation_duration_seconds", map[string]string{"volume_plugin": "kubernetes.io/empty-dir", "operation_name": "volume_mount"}) {
			t.Errorf("metrics lack the pod's kubelet series")
		}
		// The pod's emptyDir, measured by nodelet-runtime every minute.
		eventually.True(t, 90*time.Second, "nodelet_pod_volume_stats_used_bytes of the emptyDir", func() bool {
			out, _, code := kubectl(t, "", "get", "--raw", proxy+"/metrics")
			return code == 0 && hasSeries(parseMetrics(t, out), "nodelet_pod_volume_stats_used_bytes", map[string]string{"namespace": ns, "pod": "srv", "volume": "data"})
		})
		// /runningpods/: the runtime's view.
		var running corev1.PodList
		if err := json.Unmarshal([]byte(mustKubectl(t, "", "get", "--raw", proxy+"/runningpods/")), &running); err != nil {
			t.Fatal(err)
		}
		found = false
		for _, p := range running.Items {
			found = found || (p.Namespace == ns && p.Name == "srv" && len(p.Spec.Containers) == 4)
		}
		if !found {
			t.Errorf("runningpods has no %s/srv with its 4 containers: %+v", ns, running.Items)
		}
		// /logs/ (server.enableSystemLogHandler, on by default): /var/log.
		if out := mustKubectl(t, "", "get", "--raw", proxy+"/logs/"); !strings.Contains(out, "<a href=") {
			t.Errorf("logs/ = %.300q", out)
		}
	})

	t.Run("401 and 403", func(t *testing.T) {
		base := fmt.Sprintf("https://127.0.0.1:%d", n.ServerPort)
		insecure := insecureClient()
		if code, body := httpsGet(t, insecure, base+"/pods", ""); code != http.StatusUnauthorized || body != "Unauthorized" {
			t.Errorf("no credentials: %d %q", code, body)
		}
		if code, body := httpsGet(t, insecure, base+"/pods", "not-a-token"); code != http.StatusUnauthorized {
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
		if code, body := httpsGet(t, insecure, base+"/containerLogs/"+ns+"/srv/side", tr.Status.Token); code != http.StatusForbidden || body != want {
			t.Errorf("token without nodes/proxy: %d %q, want 403 %q", code, body, want)
		}
		// kube-apiserver's kubelet client certificate (system:masters).
		crt, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.key"))
		if err != nil {
			t.Fatal(err)
		}
		masters := insecureClient(crt)
		if code, body := httpsGet(t, masters, base+"/containerLogs/"+ns+"/srv/side?tailLines=1", ""); code != http.StatusOK || body != "side-err\n" {
			t.Errorf("system:masters certificate: %d %q", code, body)
		}
		if code, body := httpsGet(t, masters, base+"/containerLogs/"+ns+"/nope/side", ""); code != http.StatusNotFound || body != `pod "nope" does not exist` {
			t.Errorf("unknown pod: %d %q", code, body)
		}
		if code, body := httpsGet(t, masters, base+"/containerLogs/"+ns+"/srv/nope", ""); code != http.StatusNotFound || body != `container "nope" not found in pod "srv"` {
			t.Errorf("unknown container: %d %q", code, body)
		}
		if code, body := httpsGet(t, masters, base+"/containerLogs/"+ns+"/srv/side?tailLines=x", ""); code != http.StatusBadRequest {
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
		sc, errb, _ := kubectlStream(t, actx, nil, "-n", ns, "attach", "srv", "-c", "app")
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

	t.Run("kubectl debug", func(t *testing.T) { kubectlDebug(t, ctx, ns, pods) })

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
		sc, _, wait := kubectlStream(t, fctx, nil, "-n", ns, "logs", "-f", "--tail=1", "srv", "-c", "app")
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
		_ = wait()
		if fctx.Err() != nil {
			t.Fatal("kubectl logs -f did not end when nodelet-server was killed")
		}
		eventually.True(t, 60*time.Second, "nodelet-server back", func() bool {
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
		eventually.True(t, 30*time.Second, "kubectl logs works again", func() bool {
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
