package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	internalapi "k8s.io/cri-api/pkg/apis"
	crierrors "k8s.io/cri-api/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container stop signals (lifecycle.stopSignal), as the kubelet's
// getContainerConfigStopSignal with ContainerStopSignals on: the signal
// goes to CRI in ContainerConfig.stop_signal, and the runtime sends it
// instead of the image's STOPSIGNAL when it stops the container. (The
// gate is alpha and off by default in 1.37, so the API server drops the
// field unless it has the gate on; a static pod keeps it.)
//
// Where nodelet deviates: a runtime too old for the field (containerd
// before 2.1, this machine's 1.6 among them) ignores it without a word,
// and the kubelet would then stop the container with the image's signal,
// silently. nodelet reads the created container's status, where a runtime
// that knows the field reports the stop signal it will use (the kubelet
// reads the same field for status.containerStatuses[].stopSignal); when it
// is not the one asked for, the container is removed before it starts and
// waits in CreateContainerError naming the runtime's lack. The answer is
// kept per runtime version, so later containers are refused without a
// create.

// stopSignal is the CRI signal of c's lifecycle.stopSignal
// (SIGNAL_RUNTIME_DEFAULT without one): the API's "SIGRTMIN+1" is CRI's
// SIGNAL_SIGRTMINPLUS1, as the kubelet's signalNameToRuntimeEnum.
func stopSignal(c *corev1.Container) runtimeapi.Signal {
	if c.Lifecycle == nil || c.Lifecycle.StopSignal == nil {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	name := strings.NewReplacer("+", "PLUS", "-", "MINUS").Replace(string(*c.Lifecycle.StopSignal))
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+name])
}

// stopSignals remembers, per runtime version, whether the runtime
// honours ContainerConfig.stop_signal.
// It checks each created container that asks for a stop signal.
type stopSignals struct {
	rs  stopSignalRuntime
	log *slog.Logger
	// runtime names the container runtime (set once Version answered).
	runtime runtimeInfo

	mu          sync.Mutex
	unsupported map[string]bool
}

// stopSignalRuntime is what the check asks of CRI (RuntimeService).
type stopSignalRuntime interface {
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	RemoveContainer(ctx context.Context, containerID string) error
}

var _ stopSignalRuntime = internalapi.RuntimeService(nil)

// errStopSignalUnsupported is why a container with a stop signal waits on
// a runtime that would ignore it.
func errStopSignalUnsupported(runtime string) error {
	return fmt.Errorf("lifecycle.stopSignal is not supported by the container runtime (%s): it does not report the stop signal "+
		"of the containers it creates, so it would stop the container with the image's signal", runtime)
}

// runtimeID names the runtime for messages and the support cache.
func (s *stopSignals) runtimeID() string {
	return strings.TrimSpace(s.runtime.name + " " + s.runtime.version)
}

// stopSignalRefused says, before a create, whether this runtime is known
// to ignore stop signals and c asks for one.
func (s *stopSignals) stopSignalRefused(c *corev1.Container) error {
	if stopSignal(c) == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsupported[s.runtimeID()] {
		return errStopSignalUnsupported(s.runtimeID())
	}
	return nil
}

// checkStopSignal verifies, after CreateContainer, that the runtime took
// c's stop signal; if not the container is removed and the answer kept.
func (s *stopSignals) checkStopSignal(ctx context.Context, c *corev1.Container, id string) error {
	want := stopSignal(c)
	if want == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return nil
	}
	resp, err := s.rs.ContainerStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("status of container %s: %w", id, err)
	}
	if resp.GetStatus().GetStopSignal() == want {
		return nil
	}
	s.mu.Lock()
	if s.unsupported == nil {
		s.unsupported = map[string]bool{}
	}
	s.unsupported[s.runtimeID()] = true
	s.mu.Unlock()
	if err := s.rs.RemoveContainer(ctx, id); err != nil && !crierrors.IsNotFound(err) {
		s.log.Error("Cannot remove container created without its stop signal", "containerName", c.Name, "containerID", id, "err", err)
	}
	return errStopSignalUnsupported(s.runtimeID())
}
