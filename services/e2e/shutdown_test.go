package e2e_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// privateBus runs a dbus-daemon of type system on a socket in the test's
// directory and returns its address.
func privateBus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatalf("dbus-daemon not installed (scripts/setup.sh installs it): %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_requested_reply="true"/>
  </policy>
</busconfig>
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon address: %v", err)
	}
	return strings.TrimSpace(addr)
}

// login1 is a stand-in for systemd-logind on a private bus: Inhibit hands
// out the write end of a pipe as the lock (released when every copy is
// closed, seen as EOF on the read end), InhibitDelayMaxUSec is a property,
// and PrepareForShutdown is emitted on demand.
type login1 struct {
	t    *testing.T
	conn *dbus.Conn

	mu       sync.Mutex
	locks    []string // "what:who:mode"
	released chan time.Time
}

func (l *login1) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	l.mu.Lock()
	l.locks = append(l.locks, what+":"+who+":"+mode)
	l.mu.Unlock()
	r, w := os.NewFile(uintptr(p[0]), "lock-r"), p[1]
	go func() {
		// Our copy of the write end goes once the reply has carried it.
		time.Sleep(time.Second)
		_ = syscall.Close(w)
	}()
	go func() {
		var b [1]byte
		_, _ = r.Read(b[:]) // EOF: every copy of the lock is closed
		r.Close()
		l.released <- time.Now()
	}()
	return dbus.UnixFD(w), nil
}

func startLogin1(t *testing.T, addr string, delayMax time.Duration) *login1 {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	l := &login1{t: t, conn: conn, released: make(chan time.Time, 8)}
	const path, iface = dbus.ObjectPath("/org/freedesktop/login1"), "org.freedesktop.login1.Manager"
	if err := conn.Export(l, path, iface); err != nil {
		t.Fatal(err)
	}
	if _, err := prop.Export(conn, path, prop.Map{iface: {
		"InhibitDelayMaxUSec": {Value: uint64(delayMax / time.Microsecond), Emit: prop.EmitFalse},
	}}); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.login1: %v %v", reply, err)
	}
	return l
}

func (l *login1) inhibitors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.locks...)
}

func (l *login1) prepareForShutdown(active bool) {
	l.t.Helper()
	if err := l.conn.Emit("/org/freedesktop/login1", "org.freedesktop.login1.Manager.PrepareForShutdown", active); err != nil {
		l.t.Fatal(err)
	}
}

// TestGracefulNodeShutdown: nodelet-gc takes logind's delay lock on
// shutdown; when logind signals PrepareForShutdown the node goes NotReady
// ("node is shutting down"), a pod that ignores SIGTERM lives for
// shutdownGracePeriod minus shutdownGracePeriodCriticalPods after it (6 s
// of 10 s here) before it is killed, is Failed with reason Terminated, the
// kubelet's message and a DisruptionTarget condition, a new pod is refused
// with NodeShutdown, and the lock is released once the pods are down.
func TestGracefulNodeShutdown(t *testing.T) {
	addr := privateBus(t)
	logind := startLogin1(t, addr, 30*time.Second)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	newNode(t, nodeOptions{API: true, GC: "  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 4s\n"})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eventually(t, 60*time.Second, "a delay inhibitor lock on shutdown", func() bool {
		l := logind.inhibitors()
		return len(l) == 1 && l[0] == "shutdown:nodelet:delay"
	})
	nodeReady := func(want corev1.ConditionStatus, msg string) func() bool {
		return func() bool {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == want && strings.Contains(c.Message, msg)
				}
			}
			return false
		}
	}
	eventually(t, 60*time.Second, "node Ready", nodeReady(corev1.ConditionTrue, ""))

	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	stubborn := apiPod(ns, "stubborn", "")
	stubborn.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'echo got TERM' TERM; while true; do sleep 0.2; done"}
	stubborn.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	created, err := pods.Create(ctx, stubborn, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the pod Running", func() bool {
		p, err := pods.Get(ctx, "stubborn", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})

	signalled := time.Now()
	logind.prepareForShutdown(true)
	eventually(t, 30*time.Second, "node NotReady: node is shutting down", nodeReady(corev1.ConditionFalse, "node is shutting down"))
	if _, err := pods.Create(ctx, apiPod(ns, "latecomer", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var released time.Time
	select {
	case released = <-logind.released:
	case <-time.After(60 * time.Second):
		t.Fatal("the inhibitor lock was not released")
	}
	// The group's wait ends at its grace period (the kubelet's timer) and
	// the lock goes with it; the kill itself ends at about the same time.
	if waited := released.Sub(signalled); waited < 6*time.Second || waited > 9*time.Second {
		t.Fatalf("lock released %v after PrepareForShutdown, want after the 6s of the non-critical group", waited)
	}
	var st *runtimeapi.ContainerStatus
	eventually(t, 30*time.Second, "the pod's container killed", func() bool {
		for _, c := range criContainers(t, string(created.UID)) {
			if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				resp, err := ctrd.RuntimeClient(t).Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
				if err == nil {
					st = resp.Status
				}
				return err == nil
			}
		}
		return false
	})
	lived := time.Unix(0, st.FinishedAt).Sub(signalled)
	t.Logf("pod killed %v after PrepareForShutdown (exit %d); lock released after %v", lived.Round(10*time.Millisecond),
		st.ExitCode, released.Sub(signalled).Round(10*time.Millisecond))
	if lived < 6*time.Second || lived > 8*time.Second || st.ExitCode != 137 {
		t.Fatalf("the pod lived %v after the shutdown signal (exit %d), want 6s (shutdownGracePeriod 10s - critical 4s)", lived, st.ExitCode)
	}

	eventually(t, 60*time.Second, "the pod Failed with reason Terminated", func() bool {
		p, err := pods.Get(ctx, "stubborn", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Terminated" ||
			p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				return c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet && c.Message == p.Status.Message
			}
		}
		return false
	})
	eventually(t, 60*time.Second, "the new pod refused with NodeShutdown", func() bool {
		p, err := pods.Get(ctx, "latecomer", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeShutdown" &&
			p.Status.Message == "Pod was rejected: Pod was rejected as the node is shutting down."
	})
	if evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeShutdown"}); err != nil || len(evs.Items) == 0 {
		t.Errorf("no NodeShutdown node event: %v", err)
	}

	// A cancelled shutdown: Ready again, and the lock taken again.
	logind.prepareForShutdown(false)
	eventually(t, 30*time.Second, "node Ready after the cancellation", nodeReady(corev1.ConditionTrue, ""))
	eventually(t, 30*time.Second, "the lock taken again", func() bool { return len(logind.inhibitors()) == 2 })
}
