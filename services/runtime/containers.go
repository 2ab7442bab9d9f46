package runtime

import (
	"github.com/nodelet/nodelet/internal/podutil"
	crierrors "k8s.io/cri-api/pkg/errors"

	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerInputs is what generateContainerConfig needs besides the spec.
type containerInputs struct {
	Kind         string
	RestartCount int
	ImageRef     string
	Image        *runtimeapi.Image
	PodIPs       []string
	Volumes      map[string]string
	// ImageVolumes are the image volumes the container mounts, by name
	// (imagePuller.volumes).
	ImageVolumes map[string]*runtimeapi.ImageSpec
	EtcHosts     string
	TermFile     string
	// TargetID is the container whose PID namespace an ephemeral
	// container joins (targetContainerName), "" for none.
	TargetID string
}

// containerConfig is the kubelet's generateContainerConfig.
func (m *Daemon) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, in containerInputs) (*runtimeapi.ContainerConfig, error) {
	if err := verifyRunAsNonRoot(pod, c, in.Image); err != nil {
		return nil, err
	}
	services, err := m.serviceEnv(pod)
	if err != nil {
		return nil, err
	}
	order, env, err := containerEnv(ctx, pod, c, envInputs{PodIPs: in.PodIPs, HostIPs: m.hostIPs, Node: m.capacity, Objects: m.objects, Services: services, Volumes: in.Volumes})
	if err != nil {
		return nil, err
	}
	mounts, err := m.containerMounts(ctx, pod, c, in.Volumes, in.ImageVolumes, env, in.EtcHosts, in.TermFile)
	if err != nil {
		return nil, err
	}
	devices, err := containerDevices(pod, c, in.Volumes)
	if err != nil {
		return nil, err
	}
	lookup := podutil.MappingFor(env)
	cmd := make([]string, 0, len(c.Command))
	for _, s := range c.Command {
		cmd = append(cmd, podutil.Expand(s, lookup))
	}
	args := make([]string, 0, len(c.Args))
	for _, s := range c.Args {
		args = append(args, podutil.Expand(s, lookup))
	}
	envs := make([]*runtimeapi.KeyValue, 0, len(order))
	for _, k := range order {
		envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(env[k])})
	}
	sc := securityFor(pod, c, in.Image, in.TargetID)
	if err := m.containerProfiles(pod, c, sc); err != nil {
		return nil, err
	}
	// The devices nodelet-devices allocated (GetDeviceRunContainerOptions).
	devOpts, err := m.store.devices.runOptions(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	// The CDI devices of its ResourceClaims (the DRA manager's
	// GetResources, added to the device plugins' in
	// GenerateRunContainerOptions).
	claimCDI, err := m.store.claims.cdiDevices(pod, c)
	if err != nil {
		return nil, err
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(in.RestartCount)},
		StopSignal:  stopSignal(c),
		Image:       &runtimeapi.ImageSpec{Image: in.ImageRef, UserSpecifiedImage: c.Image},
		Command:     cmd,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      mounts,
		Devices:     devices,
		Labels:      containerLabels(pod, c),
		Annotations: containerAnnotations(pod, c, in.Kind, in.RestartCount),
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", in.RestartCount)),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       containerResources(pod, c, m.capacity.Memory.Value()),
			SecurityContext: sc,
		},
	}
	devOpts.apply(cfg)
	cfg.CDIDevices = append(cfg.CDIDevices, claimCDI...)
	return cfg, nil
}

// securityFor is c's security context; with targetID (an ephemeral
// container's target) the PID namespace is the target's, as the kubelet's
// generateLinuxContainerConfig does when the pod shares none.
func securityFor(pod *corev1.Pod, c *corev1.Container, img *runtimeapi.Image, targetID string) *runtimeapi.LinuxContainerSecurityContext {
	sc := containerSecurityContext(pod, c, img)
	if targetID != "" && sc.NamespaceOptions.Pid == runtimeapi.NamespaceMode_CONTAINER {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		sc.NamespaceOptions.TargetId = targetID
	}
	return sc
}

// restartCountOf is the restart count of c's next instance: one more than
// its newest instance's, or, when CRI has none (the runtime lost its state
// or GC removed them), one more than the newest log file's number, as the
// kubelet's calcRestartCountByLogDir.
func restartCountOf(pr *podRuntime, name, logDir string) int {
	if last := pr.newest(name); last != nil {
		return last.RestartCount + 1
	}
	entries, err := os.ReadDir(filepath.Join(logDir, name))
	if err != nil {
		return 0
	}
	n := -1
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok {
			continue
		}
		base, _, _ = strings.Cut(base, ".") // rotated: N.log.<time>
		if v, err := strconv.Atoi(base); err == nil && v > n {
			n = v
		}
	}
	return n + 1
}

// terminationMessageFile creates the host file behind c's
// terminationMessagePath: <podDir>/containers/<name>/<random>.
func terminationMessageFile(stateDir string, pod *corev1.Pod, c *corev1.Container) (string, error) {
	if c.TerminationMessagePath == "" {
		return "", nil
	}
	dir := filepath.Join(podDir(stateDir, string(pod.UID)), "containers", c.Name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	p := filepath.Join(dir, hex.EncodeToString(b))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		return "", err
	}
	// Writable by any user the container may run as.
	_ = f.Chmod(0o666)
	return p, f.Close()
}

// startContainer is the kubelet's startContainer: back-off, image, config,
// CreateContainer, StartContainer, PostStart. It returns the started
// container's ID, or why the container waits when it could not start it.
func (m *Daemon) startContainer(ctx context.Context, pod *corev1.Pod, ts containerToStart, sb *sandboxInfo,
	sbConfig *runtimeapi.PodSandboxConfig, volumes map[string]string, pr *podRuntime) (string, *waitError) {
	c := ts.Spec
	event := func(typ, reason, msg string) { m.event(pod, c, ts.Kind, typ, reason, msg) }
	var id string
	restartCount := -1
	if ts.Replace != nil {
		if m.pods.get(string(pod.UID)).replacedAgain(c.Name, maxReplacements) {
			// Something keeps cancelling its start: a crash after all.
			ts.Dead, ts.Replace = ts.Replace, nil
		} else {
			m.log.Info("Replacing container whose start was interrupted", "pod", podRef(pod), "podUID", pod.UID,
				"containerName", c.Name, "containerID", ts.Replace.ID)
			if err := m.rs.RemoveContainer(ctx, ts.Replace.ID); err != nil && !crierrors.IsNotFound(err) {
				return "", &waitError{Reason: reasonContainerCreating, Message: err.Error(), Retry: time.Second}
			}
			restartCount = ts.Replace.RestartCount
		}
	}
	if ts.Existing != nil {
		// Created before nodelet-runtime was killed, never started: start
		// it rather than create a second one.
		id = ts.Existing.ID
	} else {
		if ts.Dead != nil {
			key := containerBackOffKey(pod, c)
			if wait := m.backoff.ContainerFailed(key, ts.Dead.ID, ts.Dead.FinishedAt); wait > 0 {
				_, of := m.backoff.Remaining(key)
				event(corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", c.Name, podString(pod)))
				return "", &waitError{Reason: reasonCrashLoopBackOff, Retry: wait,
					Message: fmt.Sprintf("back-off %v restarting failed container=%s pod=%s", of, c.Name, podString(pod))}
			}
		}
		secrets, secretErr := pullSecrets(ctx, m.objects, pod)
		if secretErr != nil {
			m.log.Warn("Unable to retrieve pull secret, the image pull may not succeed", "pod", podRef(pod), "podUID", pod.UID, "err", secretErr)
			event(corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", secretErr.Error())
		}
		imageRef, img, werr := m.images.ensure(ctx, pod, c, secrets, sbConfig, event)
		if werr != nil {
			return "", werr
		}
		imageVols, werr := m.images.volumes(ctx, pod, c, sbConfig, secrets, event)
		if werr != nil {
			return "", werr
		}
		if restartCount < 0 {
			restartCount = restartCountOf(pr, c.Name, sbConfig.LogDirectory)
		}
		in := containerInputs{
			Kind: ts.Kind, RestartCount: restartCount,
			ImageRef: imageRef, Image: img, PodIPs: podIPsOf(pod, sb.IPs, m.hostIPs), Volumes: volumes,
			ImageVolumes: imageVols,
		}
		if ts.Target != "" {
			// The kubelet's startSpec.getTargetID: the target's newest
			// instance, whatever its state.
			target := pr.newest(ts.Target)
			if target == nil {
				return "", m.configError(event, fmt.Errorf("unable to find target container %v", ts.Target))
			}
			in.TargetID = target.ID
		}
		var err error
		if in.EtcHosts, err = m.etcHosts(pod, sb); err != nil {
			return "", m.configError(event, err)
		}
		if in.TermFile, err = terminationMessageFile(m.cfg.Node.StateDir, pod, c); err != nil {
			return "", m.configError(event, err)
		}
		cfg, err := m.containerConfig(ctx, pod, c, in)
		if err != nil {
			return "", m.configError(event, err)
		}
		if err := m.stopSignals.stopSignalRefused(c); err != nil {
			event(corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
			return "", &waitError{Reason: reasonCreateContainerError, Message: err.Error(), Retry: 30 * time.Second}
		}
		if err := mkdirAll(filepath.Join(sbConfig.LogDirectory, c.Name), 0o755); err != nil {
			return "", m.configError(event, err)
		}
		// The kubelet's startContainer counts every container it creates,
		// and every create or start that fails by its gRPC code.
		m.metrics.startedContainers.WithLabelValues(containerType(ts.Kind)).Inc()
		id, err = m.rs.CreateContainer(ctx, sb.ID, cfg, sbConfig)
		if err != nil {
			m.metrics.containersErrors.WithLabelValues(containerType(ts.Kind), grpcCode(err).String()).Inc()
		}
		if err == nil {
			err = m.stopSignals.checkStopSignal(ctx, c, id)
		}
		if err != nil {
			event(corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
			return "", &waitError{Reason: reasonCreateContainerError, Message: err.Error(), Retry: 2 * time.Second}
		}
		event(corev1.EventTypeNormal, "Created", "Created container: "+c.Name)
	}
	if err := m.rs.StartContainer(ctx, id); err != nil {
		m.metrics.containersErrors.WithLabelValues(containerType(ts.Kind), grpcCode(err).String()).Inc()
		if strings.Contains(err.Error(), "already in starting state") {
			// A start asked for by a killed nodelet-runtime is still under
			// way: wait for it.
			return "", &waitError{Reason: reasonContainerCreating, Message: "the container is being started", Retry: time.Second}
		}
		event(corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return "", &waitError{Reason: reasonRunContainerError, Message: err.Error(), Retry: time.Second}
	}
	event(corev1.EventTypeNormal, "Started", "Started container "+c.Name)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		hctx, cancel := context.WithTimeout(ctx, m.cfg.Runtime.RuntimeRequestTimeout)
		msg, err := m.hooks.runHook(hctx, pod, c, id, c.Lifecycle.PostStart, sb.IPs)
		cancel()
		if err != nil {
			m.log.Info("PostStart hook failed", "pod", podRef(pod), "podUID", pod.UID, "containerName", c.Name, "err", err)
			event(corev1.EventTypeWarning, "FailedPostStartHook", msg)
			info := &containerInfo{ID: id, Name: c.Name, State: runtimeapi.ContainerState_CONTAINER_RUNNING}
			if kerr := m.killer.killContainer(ctx, pod, info, containerGrace(pod, info, nil), false,
				fmt.Sprintf("FailedPostStartHook"), ""); kerr != nil {
				m.log.Error("Cannot kill container after its PostStart hook failed", "pod", podRef(pod), "containerName", c.Name, "err", kerr)
			}
			return "", &waitError{Reason: reasonPostStartHookError, Message: msg}
		}
	}
	return id, nil
}

// maxReplacements bounds how often a container whose start was interrupted
// is replaced without back-off.
const maxReplacements = 3

func (m *Daemon) configError(event func(typ, reason, msg string), err error) *waitError {
	event(corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
	return &waitError{Reason: reasonCreateConfigError, Message: err.Error(), Retry: 5 * time.Second}
}

// etcHosts writes the pod's managed /etc/hosts (the kubelet's makeMounts
// with the short hostname and the domain of GeneratePodHostNameAndDomain),
// unless the container runtime must not touch it (a pod that mounts its
// own is handled per container).
func (m *Daemon) etcHosts(pod *corev1.Pod, sb *sandboxInfo) (string, error) {
	host, domain, err := podHostname(pod, m.dns.ClusterDomain)
	if err != nil {
		return "", err
	}
	return writeEtcHosts(m.cfg.Node.StateDir, pod, sb.IPs, host, domain)
}

// podIPsOf is the pod's IPs as the downward API sees them: a host-network
// pod has the node's (the kubelet's syncPod overwrites podStatus.IPs with
// generateAPIPodStatus's, which gives host-network pods the host IPs).
func podIPsOf(pod *corev1.Pod, sandboxIPs, hostIPs []string) []string {
	if pod.Spec.HostNetwork && len(sandboxIPs) == 0 {
		return hostIPs
	}
	return sandboxIPs
}
