package runtime

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// printedEnv reads the variables a container printed with `env` from its
// CRI log file (<podLogsDir>/<ns>_<name>_<uid>/<container>/0.log).
func (h *harness) printedEnv(pod *corev1.Pod, container string) map[string]string {
	h.t.Helper()
	path := filepath.Join(podLogDir(h.cfg.Node.PodLogsDir, pod), container, "0.log")
	var env map[string]string
	waitFor(h.t, time.Minute, "env printed in "+path, func() (bool, string) {
		f, err := os.Open(path)
		if err != nil {
			return false, err.Error()
		}
		defer f.Close()
		env = map[string]string{}
		done := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// <time> stdout F <line>
			parts := strings.SplitN(sc.Text(), " ", 4)
			if len(parts) < 4 {
				continue
			}
			if parts[3] == "--end--" {
				done = true
				continue
			}
			if k, v, ok := strings.Cut(parts[3], "="); ok {
				env[k] = v
			}
		}
		return done, "no --end-- line yet"
	})
	return env
}

// A pod that prints its environment sees KUBERNETES_SERVICE_HOST/PORT of
// default/kubernetes and the variables of its namespace's services (not
// of a headless one, nor of another namespace's), its own env winning over
// a service variable of the same name; with enableServiceLinks: false only
// the KUBERNETES_* ones.
func TestServiceEnvironmentThroughAPI(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	master, err := admin.CoreV1().Services("default").Get(h.ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("default/kubernetes: %v", err)
	}
	web, err := admin.CoreV1().Services(ns).Create(h.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "my-web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Services(ns).Create(h.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "headless"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Port: 81}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := cp.Namespace(t)
	if _, err := admin.CoreV1().Services(other).Create(h.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 82}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	printer := func(name string, links *bool) *corev1.Pod {
		c := busybox("app", "env; echo --end--; exec sleep 3600")
		c.Env = []corev1.EnvVar{
			{Name: "MY_WEB_SERVICE_PORT", Value: "mine"},
			{Name: "API_URL", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
		}
		p := newPod(name, c)
		p.Spec.EnableServiceLinks = links
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		return p
	}
	withLinks := createPod(t, h, cp, ns, printer("links", nil))
	noLinks := createPod(t, h, cp, ns, printer("nolinks", ptr.To(false)))
	if withLinks.Spec.EnableServiceLinks == nil || !*withLinks.Spec.EnableServiceLinks {
		t.Fatalf("the API did not default enableServiceLinks to true: %v", withLinks.Spec.EnableServiceLinks)
	}

	ip, wip := master.Spec.ClusterIP, web.Spec.ClusterIP
	port := master.Spec.Ports[0].Port
	want := map[string]string{
		"KUBERNETES_SERVICE_HOST":       ip,
		"KUBERNETES_SERVICE_PORT":       "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT":               "tcp://" + hostPort(ip, int(port)),
		"KUBERNETES_PORT_443_TCP":       "tcp://" + hostPort(ip, int(port)),
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_443_TCP_PORT":  "443",
		"KUBERNETES_PORT_443_TCP_ADDR":  ip,
		"API_URL":                       "https://" + ip + ":443",
		"MY_WEB_SERVICE_PORT":           "mine",
		"MY_WEB_SERVICE_HOST":           wip,
		"MY_WEB_SERVICE_PORT_HTTP":      "80",
		"MY_WEB_SERVICE_PORT_DNS":       "53",
		"MY_WEB_PORT":                   "tcp://" + wip + ":80",
		"MY_WEB_PORT_80_TCP":            "tcp://" + wip + ":80",
		"MY_WEB_PORT_80_TCP_ADDR":       wip,
		"MY_WEB_PORT_53_UDP":            "udp://" + wip + ":53",
		"MY_WEB_PORT_53_UDP_PROTO":      "udp",
		"MY_WEB_PORT_53_UDP_PORT":       "53",
		"MY_WEB_PORT_53_UDP_ADDR":       wip,
	}
	env := h.printedEnv(withLinks, "app")
	for k, v := range want {
		if env[k] != v {
			t.Errorf("with service links: %s=%q, want %q", k, env[k], v)
		}
	}
	for k := range env {
		if strings.HasPrefix(k, "HEADLESS_") || strings.HasPrefix(k, "ELSEWHERE_") {
			t.Errorf("with service links: %s from a headless or another namespace's service", k)
		}
	}

	env = h.printedEnv(noLinks, "app")
	for k, v := range want {
		kube := strings.HasPrefix(k, "KUBERNETES_") || k == "API_URL" || k == "MY_WEB_SERVICE_PORT"
		if kube && env[k] != v {
			t.Errorf("without service links: %s=%q, want %q", k, env[k], v)
		}
		if !kube && env[k] != "" {
			t.Errorf("without service links: %s=%q is set", k, env[k])
		}
	}
}

// RuntimeClass: the sandbox runs with the class's handler (runc works);
// a handler containerd does not know fails the sandbox with the kubelet's
// FailedCreatePodSandBox event and message; a class that does not exist
// (deleted after the pod was admitted) fails it with the lister's NotFound
// (the same words as the kubelet's: runtimeclass.node.k8s.io "x" not found).
func TestRuntimeClassThroughAPI(t *testing.T) {
	cp := sharedControlPlane(t)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	rcs := admin.NodeV1().RuntimeClasses()
	name := func(s string) string { return ns + "-" + s }
	for class, handler := range map[string]string{"runc": "runc", "bogus": "no-such-handler", "gone": "runc"} {
		if _, err := rcs.Create(t.Context(), &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name(class)}, Handler: handler},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rcs.Delete(t.Context(), name(class), metav1.DeleteOptions{}) })
	}
	h := newHarness(t, harnessOptions{noStart: true})
	pod := func(podName, class string) *corev1.Pod {
		p := newPod(podName, busybox("app", "exec sleep 3600"))
		p.Spec.RuntimeClassName = ptr.To(name(class))
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		p.Namespace, p.UID = ns, ""
		created, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	good, bogus, gone := pod("good", "runc"), pod("bogus", "bogus"), pod("gone", "gone")
	// The class goes after the pod was admitted (the API refuses pods of
	// a missing class); the runtime starts after, so it never saw it.
	if err := rcs.Delete(t.Context(), name("gone"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.start(func(o *Options) { o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1") })
	for _, p := range []*corev1.Pod{good, bogus, gone} {
		h.run(p)
	}

	h.waitObserved(good, 2*time.Minute, "running with handler runc", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if sbs := h.sandboxes(good.UID); len(sbs) != 1 || sbs[0].RuntimeHandler != "runc" {
		t.Errorf("sandboxes of the runc pod: %v", sbs)
	}
	// The runtime's own words for a handler it lacks, passed on as the
	// kubelet does: containerd 2.x names the sandbox.
	noHandler := regexp.QuoteMeta(`Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "no-such-handler" is configured`)
	if major, err := testenv.ContainerdMajor(); err != nil {
		t.Fatal(err)
	} else if major >= 2 {
		noHandler = regexp.QuoteMeta(`Failed to create pod sandbox: rpc error: code = Unknown desc = unable to get OCI runtime for sandbox "`) +
			`[0-9a-f]{64}` + regexp.QuoteMeta(`": no runtime for "no-such-handler" is configured`)
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want *regexp.Regexp
	}{
		{bogus, regexp.MustCompile(`^` + noHandler + `$`)},
		{gone, regexp.MustCompile(`^` + regexp.QuoteMeta(`Failed to create pod sandbox: runtimeclass.node.k8s.io "`+name("gone")+`" not found`) + `$`)},
	} {
		o := h.waitObserved(tc.pod, time.Minute, "sandbox failed", func(o *schemas.PodObserved) bool { return o.Reason == "FailedCreatePodSandBox" })
		if !tc.want.MatchString(o.Message) {
			t.Errorf("pod %s: message %q, want %s", tc.pod.Name, o.Message, tc.want)
		}
		evs := h.events.await(t, tc.pod.UID, "FailedCreatePodSandBox", 1)
		if len(evs) == 0 || !tc.want.MatchString(evs[0].Message) || evs[0].Type != corev1.EventTypeWarning {
			t.Errorf("pod %s: events %+v", tc.pod.Name, evs)
		}
		if sbs := h.sandboxes(tc.pod.UID); len(sbs) != 0 {
			t.Errorf("pod %s: %d sandboxes", tc.pod.Name, len(sbs))
		}
	}
}
