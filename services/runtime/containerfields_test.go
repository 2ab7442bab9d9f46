package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// Pod fields the field ledger (internal/podfields) lists as honoured,
// shown on the configs the runtime hands CRI: groups, stdinOnce, a host
// port's host IP.
func TestSecurityGroupsAndStreams(t *testing.T) {
	m := testManager(t)
	own := busybox("own", "")
	own.SecurityContext = &corev1.SecurityContext{RunAsGroup: ptr.To[int64](3001)}
	own.Stdin, own.StdinOnce = true, true
	own.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1", Protocol: corev1.ProtocolTCP}}
	pod := newPod("groups", busybox("inherits", ""), own)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsGroup: ptr.To[int64](3000), SupplementalGroups: []int64{4000}, FSGroup: ptr.To[int64](5000)}

	sb, err := m.sandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	lsc := sb.Linux.SecurityContext
	if lsc.RunAsGroup.GetValue() != 3000 || !slices.Equal(lsc.SupplementalGroups, []int64{4000, 5000}) {
		t.Fatalf("sandbox runAsGroup %v supplementalGroups %v", lsc.RunAsGroup, lsc.SupplementalGroups)
	}
	if len(sb.PortMappings) != 1 || sb.PortMappings[0].HostIp != "127.0.0.1" || sb.PortMappings[0].HostPort != 8080 {
		t.Fatalf("port mappings %v", sb.PortMappings)
	}
	for _, tc := range []struct {
		c     *corev1.Container
		group int64
	}{{&pod.Spec.Containers[0], 3000}, {&pod.Spec.Containers[1], 3001}} {
		cfg, err := m.containerConfig(context.Background(), pod, tc.c, containerInputs{})
		if err != nil {
			t.Fatal(err)
		}
		sc := cfg.Linux.SecurityContext
		if sc.RunAsGroup.GetValue() != tc.group || !slices.Equal(sc.SupplementalGroups, []int64{4000, 5000}) {
			t.Fatalf("%s: runAsGroup %v supplementalGroups %v", tc.c.Name, sc.RunAsGroup, sc.SupplementalGroups)
		}
		if tc.c.Name == "own" && (!cfg.Stdin || !cfg.StdinOnce) {
			t.Fatalf("stdin %v stdinOnce %v", cfg.Stdin, cfg.StdinOnce)
		}
	}
}

// envFrom a secret (with its prefix), and optional references to what
// does not exist are left out; a fieldRef of another apiVersion than v1
// is refused, as the kubelet's ConvertDownwardAPIFieldLabel.
func TestEnvSourcesAndOptionals(t *testing.T) {
	m := testManager(t)
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	c := busybox("a", "")
	c.EnvFrom = []corev1.EnvFromSource{
		{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("sec")}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("none"), Optional: ptr.To(true)}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("none"), Optional: ptr.To(true)}},
	}
	c.Env = []corev1.EnvVar{
		{Name: "CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cm"), Key: "nope", Optional: ptr.To(true)}}},
		{Name: "SEC", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("none"), Key: "k", Optional: ptr.To(true)}}},
		{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
	}
	pod := newPod("env", c)
	_, env, err := containerEnv(context.Background(), pod, &pod.Spec.Containers[0], envInputs{Objects: m.objects})
	if err != nil {
		t.Fatal(err)
	}
	if env["S_token"] != "t0k" || env["NAME"] != "env" {
		t.Fatalf("env %v", env)
	}
	for _, k := range []string{"CM", "SEC"} {
		if _, ok := env[k]; ok {
			t.Errorf("optional %s set", k)
		}
	}
	pod.Spec.Containers[0].Env[2].ValueFrom.FieldRef.APIVersion = "v2"
	if _, _, err := containerEnv(context.Background(), pod, &pod.Spec.Containers[0], envInputs{Objects: m.objects}); err == nil ||
		!strings.Contains(err.Error(), "unsupported pod version: v2") {
		t.Fatalf("fieldRef apiVersion v2: %v", err)
	}
	items := []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}
	if _, err := volumes.DownwardAPIPayload(items, pod, nil, nil); err == nil || !strings.Contains(err.Error(), "unsupported pod version: v2") {
		t.Fatalf("downward API volume with apiVersion v2: %v", err)
	}
}

// subPathExpr: the mount is the volume's subdirectory named by the
// container's environment.
func TestSubPathExprMount(t *testing.T) {
	testenv.RequiresRoot(t)
	m := testManager(t)
	m.log = bustest.Logger()
	c := busybox("a", "")
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPathExpr: "logs/$(POD_NAME)"}}
	pod := newPod("expr", c)
	vol := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, mp := range testenv.MountsUnder(m.cfg.Node.StateDir) {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	})
	mounts, err := m.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], map[string]string{"data": vol}, nil,
		map[string]string{"POD_NAME": "expr-1"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 || mounts[0].ContainerPath != "/data" || !strings.Contains(mounts[0].HostPath, "volume-subpaths") {
		t.Fatalf("mounts %v", mounts)
	}
	if _, err := filepath.EvalSymlinks(filepath.Join(vol, "logs", "expr-1")); err != nil {
		t.Fatalf("subPathExpr directory not made: %v", err)
	}
	if _, err := m.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], map[string]string{"data": vol}, nil, nil, "", ""); err == nil ||
		!strings.Contains(err.Error(), "missing value for POD_NAME") {
		t.Fatalf("unset variable: %v", err)
	}
}

// Lifecycle handlers: a sleep waits its seconds on the clock; a tcpSocket
// handler fails the hook, as the kubelet's handler runner fails it.
func TestHookSleepAndTCPSocket(t *testing.T) {
	m := testManager(t)
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m.clock = clk
	m.hooks = &hookRunner{clock: clk}
	pod := newPod("hooks", busybox("a", ""))
	c := &pod.Spec.Containers[0]
	done := make(chan error, 1)
	go func() {
		_, err := m.hooks.runHook(context.Background(), pod, c, "id", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}, nil)
		done <- err
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(4 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("sleep of 5 seconds ended after 4: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("sleep hook: %v", err)
	}
	msg, err := m.hooks.runHook(context.Background(), pod, c, "id", &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}, nil)
	if err == nil || !strings.Contains(msg, "tcpSocket is not a valid lifecycle handler") {
		t.Fatalf("tcpSocket hook: %q %v", msg, err)
	}
}
