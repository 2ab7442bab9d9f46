package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podLogDir is the kubelet's BuildPodLogsDirectory: <root>/<ns>_<name>_<uid>.
func podLogDir(root string, pod *corev1.Pod) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// podLogDirOf is podLogDir for a pod known only from CRI labels.
func podLogDirOf(root, ns, name, uid string) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", ns, name, uid))
}

// sandboxConfig is the kubelet's generatePodSandboxConfig.
func (m *Daemon) sandboxConfig(pod *corev1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Labels:       podLabels(pod),
		Annotations:  podAnnotations(pod),
		LogDirectory: podLogDir(m.cfg.Node.PodLogsDir, pod),
	}
	dns, err := podDNS(pod, m.dns)
	if err != nil {
		return nil, err
	}
	cfg.DnsConfig = dns
	if !pod.Spec.HostNetwork {
		host, domain, err := podHostname(pod, m.dns.ClusterDomain)
		if err != nil {
			return nil, err
		}
		if cfg.Hostname, err = kernelHostname(pod, host, domain); err != nil {
			return nil, err
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      protocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	psc := pod.Spec.SecurityContext
	lsc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions:   namespaceOptions(pod),
		SupplementalGroups: supplementalGroups(pod),
		Privileged:         anyPrivileged(pod),
	}
	if psc != nil {
		if psc.RunAsUser != nil {
			lsc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			lsc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
	}
	if err := m.sandboxProfiles(pod, lsc); err != nil {
		return nil, err
	}
	linux := &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent:    m.resources.cgroupParent(pod),
		SecurityContext: lsc,
	}
	if psc != nil && len(psc.Sysctls) > 0 {
		linux.Sysctls = map[string]string{}
		for _, s := range psc.Sysctls {
			linux.Sysctls[s.Name] = s.Value
		}
	}
	cfg.Linux = linux
	return cfg, nil
}

func protocol(p corev1.Protocol) runtimeapi.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case corev1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	default:
		return runtimeapi.Protocol_TCP
	}
}

// createSandbox creates the pod's log directory and runs its sandbox with
// the handler of its RuntimeClass (the kubelet's createPodSandbox), and
// says how long RunPodSandbox took, for the "Created pod sandbox" log line.
func (m *Daemon) createSandbox(ctx context.Context, pod *corev1.Pod, attempt uint32) (string, *runtimeapi.PodSandboxConfig, time.Duration, error) {
	cfg, err := m.sandboxConfig(pod, attempt)
	if err != nil {
		return "", nil, 0, err
	}
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return "", cfg, 0, err
	}
	if handler != "" {
		m.log.Debug("Running pod with runtime handler", "pod", podRef(pod), "podUID", pod.UID, "runtimeHandler", handler)
	}
	if err := mkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", cfg, 0, err
	}
	started := time.Now()
	id, err := m.rs.RunPodSandbox(ctx, cfg, handler)
	took := time.Since(started)
	// The kubelet's createPodSandbox and SyncPod: one started pod per
	// sandbox asked for, its duration and errors by handler.
	m.metrics.startedPods.Inc()
	m.metrics.sandboxDuration.WithLabelValues(handler).Observe(took.Seconds())
	if err != nil {
		m.metrics.startedPodsErrors.Inc()
		m.metrics.sandboxErrors.WithLabelValues(handler).Inc()
		return "", cfg, took, err
	}
	return id, cfg, took, nil
}

// takeSandboxSlot waits for a slot of runtime.maxConcurrentSandboxCreations
// (none when unbounded). The slot covers the pass's whole preparation of a
// new sandbox, the pod cgroup and volumes included, not RunPodSandbox
// alone: on cgroup v1 a pod cgroup is a dozen mkdirs under the kernel's one
// cgroup lock, which runc needs for every sandbox too, so a burst of pods
// all making theirs at once holds up the first sandboxes (the bench
// measured the first of 50 ready 0.3 s later than the floor's).
func (s *podSync) takeSandboxSlot(ctx context.Context) *syncResult {
	slots := s.m.sandboxSlots
	if slots == nil {
		return nil
	}
	queued := time.Now()
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return &syncResult{}
	}
	s.slot, s.slotWait = true, time.Since(queued)
	return nil
}

// quickVolumes: every volume of pod is made on the node alone, so setting
// them up while holding a sandbox slot holds it only briefly. A claim, a
// CSI or other plugin volume may wait on a driver or a remote system; in
// API mode configMap, secret and projected volumes read the API server.
func quickVolumes(pod *corev1.Pod, apiMode bool) bool {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil, v.HostPath != nil, v.DownwardAPI != nil:
		case (v.ConfigMap != nil || v.Secret != nil || v.Projected != nil) && !apiMode:
		default:
			return false
		}
	}
	return true
}

// releaseSandboxSlot frees the pass's slot, if it holds one.
func (s *podSync) releaseSandboxSlot() {
	if s.slot {
		s.slot = false
		<-s.m.sandboxSlots
	}
}
