package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/schemas"
)

const probedManifest = `apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: live
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, "touch /tmp/healthy; sleep 3; rm /tmp/healthy; sleep 3600"]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
      failureThreshold: 2
  - name: web
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, "mkdir -p /srv; exec httpd -f -p 8080 -h /srv"]
    readinessProbe:
      httpGet: {path: /ready, port: 8080}
      periodSeconds: 1
  - name: slow
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
    startupProbe:
      exec: {command: [cat, /never]}
      periodSeconds: 1
      failureThreshold: 3
    livenessProbe:
      exec: {command: [cat, /never-either]}
      periodSeconds: 1
`

// events collects the node's events of one pod from the stream.
type eventLog struct {
	mu sync.Mutex
	ev []schemas.Event
}

func (l *eventLog) find(reason, contains string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.Reason == reason && strings.Contains(e.Message, contains) {
			n++
		}
	}
	return n
}

// TestProbesEndToEnd: the prober's results act through the runtime and
// status — a failing liveness probe restarts its container with an
// Unhealthy event, readiness gates Ready both ways, and a startup probe
// that never succeeds restarts its container while liveness never runs.
func TestProbesEndToEnd(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{})
	log := &eventLog{}
	tap := n.Connect(bus.Tap)
	sub, err := tap.NC.Subscribe(bus.SubjectEventsAll, func(m *nats.Msg) {
		if _, ev, err := schemas.Decode[schemas.Event](m.Data); err == nil {
			log.mu.Lock()
			log.ev = append(log.ev, *ev)
			log.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	n.WriteManifest("probed.yaml", probedManifest)
	name := "probed-" + nodeName
	status := func(p *corev1.Pod, c string) *corev1.ContainerStatus {
		for i := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[i].Name == c {
				return &p.Status.ContainerStatuses[i]
			}
		}
		return nil
	}

	// Liveness: after the file goes, 2 failures restart the container.
	p := n.WaitPod(name, 2*time.Minute, "live restarted by its liveness probe", func(p *corev1.Pod) bool {
		s := p != nil && status(p, "live") != nil
		return s && status(p, "live").RestartCount >= 1
	})
	if n := log.find("Unhealthy", "Liveness probe failed"); n == 0 {
		t.Errorf("no Unhealthy event for the liveness failure")
	}
	if n := log.find("Killing", "failed liveness probe"); n == 0 {
		t.Errorf("no Killing event naming the liveness probe")
	}

	// Readiness: not ready until /ready exists.
	if s := status(p, "web"); s == nil || s.Ready {
		t.Fatalf("web ready without /ready: %+v", s)
	}
	uid := string(p.UID)
	var webID string
	for _, c := range e2e.CRIContainers(t, ctrd, uid) {
		if c.Metadata.Name == "web" && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			webID = c.Id
		}
	}
	exec := func(cmd ...string) {
		t.Helper()
		c := ctrd.RuntimeClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Runtime.ExecSync(ctx, e2e.ExecReq(webID, cmd)); err != nil {
			t.Fatalf("exec %v: %v", cmd, err)
		}
	}
	exec("sh", "-c", "echo ok > /srv/ready")
	n.WaitPod(name, time.Minute, "web ready", func(p *corev1.Pod) bool {
		return p != nil && status(p, "web") != nil && status(p, "web").Ready
	})
	exec("rm", "/srv/ready")
	n.WaitPod(name, time.Minute, "web not ready again", func(p *corev1.Pod) bool {
		if p == nil || status(p, "web") == nil || status(p, "web").Ready {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionFalse
			}
		}
		return false
	})

	// Startup: never succeeds, so slow restarts after 3 failures and its
	// liveness probe never runs.
	n.WaitPod(name, 2*time.Minute, "slow restarted by its startup probe", func(p *corev1.Pod) bool {
		return p != nil && status(p, "slow") != nil && status(p, "slow").RestartCount >= 1
	})
	if n := log.find("Unhealthy", "Startup probe failed"); n == 0 {
		t.Errorf("no Unhealthy event for the startup failure")
	}
	if n := log.find("Unhealthy", "never-either"); n != 0 {
		t.Errorf("the liveness probe of slow ran before its startup probe succeeded")
	}
}
