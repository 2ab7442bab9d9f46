package runtime

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/bus/bustest"
)

// Issue 32: lifecycle.stopSignal reaches CRI (ContainerConfig.stop_signal,
// the kubelet's getContainerConfigStopSignal), and a runtime that does not
// report taking it gets no container with it.
func TestStopSignal(t *testing.T) {
	for sig, want := range map[corev1.Signal]runtimeapi.Signal{
		corev1.SIGUSR1: runtimeapi.Signal_SIGNAL_SIGUSR1, corev1.SIGQUIT: runtimeapi.Signal_SIGNAL_SIGQUIT,
		corev1.SIGRTMINPLUS1: runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1, corev1.SIGRTMAXMINUS2: runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS2,
	} {
		c := busybox("a", "")
		c.Lifecycle = &corev1.Lifecycle{StopSignal: &sig}
		if got := stopSignal(&c); got != want {
			t.Errorf("stopSignal(%s) = %s, want %s", sig, got, want)
		}
	}
	if got := stopSignal(&corev1.Container{}); got != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		t.Errorf("no stopSignal: %s", got)
	}

	m := testManager(t)
	m.log = bustest.Logger()
	m.runtime = runtimeInfo{name: "containerd", version: "1.6.20"}
	fake := critest.NewFakeRuntimeService()
	m.rs = fake
	m.stopSignals.rs, m.stopSignals.log, m.stopSignals.runtime = fake, m.log, m.runtime
	sig := corev1.SIGUSR1
	pod := newPod("p", busybox("a", ""))
	c := &pod.Spec.Containers[0]
	c.Lifecycle = &corev1.Lifecycle{StopSignal: &sig}
	cfg, err := m.containerConfig(context.Background(), pod, c, containerInputs{})
	if err != nil || cfg.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR1 {
		t.Fatalf("container config stop signal %v (%v)", cfg.GetStopSignal(), err)
	}

	// A runtime that reports the signal it will use keeps the container.
	ctx := context.Background()
	sb, _ := fake.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Uid: "u"}}, "")
	id, _ := fake.CreateContainer(ctx, sb, cfg, nil)
	fake.Containers[id].StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
	if err := m.stopSignals.checkStopSignal(ctx, c, id); err != nil {
		t.Fatalf("supported runtime: %v", err)
	}
	// One that does not (the fake, like containerd 1.6, reports none): the
	// container is removed and later ones are refused before a create.
	id2, _ := fake.CreateContainer(ctx, sb, cfg, nil)
	err = m.stopSignals.checkStopSignal(ctx, c, id2)
	if err == nil || !strings.Contains(err.Error(), "lifecycle.stopSignal is not supported by the container runtime (containerd 1.6.20)") {
		t.Fatalf("unsupported runtime: %v", err)
	}
	if _, ok := fake.Containers[id2]; ok {
		t.Fatal("the container created without its stop signal was kept")
	}
	if err := m.stopSignals.stopSignalRefused(c); err == nil {
		t.Fatal("a second container with a stop signal is not refused at once")
	}
	if err := m.stopSignals.stopSignalRefused(&pod.Spec.Containers[0]); err == nil {
		t.Fatal("refusal forgotten")
	}
	if err := m.stopSignals.stopSignalRefused(&corev1.Container{Name: "plain"}); err != nil {
		t.Fatalf("a container without a stop signal refused: %v", err)
	}
}
