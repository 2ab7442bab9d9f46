package sources

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
)

// setPodDefaults applies to a pod from a file or URL the defaults that
// kube-apiserver applies to a v1 Pod on create (k8s.io/kubernetes
// pkg/apis/core/v1 defaults.go and its generated SetObjectDefaults_Pod, at
// v1.37), so a static pod looks to every other part of the node exactly
// like a pod from the API. That package is not importable without pulling
// in all of Kubernetes; TestDefaultsMatchAPIServer keeps this copy honest
// by creating the same pods through a real kube-apiserver.
//
// Left out on purpose: what admission plugins add (service account token
// volume, priority, default tolerations: the kubelet does not add those to
// static pods either), pod-level resource defaulting (applied at create by
// the registry strategy, not by defaulting, since 1.37), and defaults of
// alpha features that are off by default (H2CContainerProbe).
func setPodDefaults(pod *corev1.Pod) {
	spec := &pod.Spec

	// SetDefaults_Pod.
	if spec.TerminationGracePeriodSeconds != nil && *spec.TerminationGracePeriodSeconds < 0 {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			requestsFromLimits(&cs[i].Resources)
		}
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(corev1.DefaultEnableServiceLinks)
	}
	if spec.HostNetwork {
		hostNetworkPorts(spec.Containers)
		hostNetworkPorts(spec.InitContainers)
	}

	// SetDefaults_PodSpec.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}

	for i := range spec.Volumes {
		volumeDefaults(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		containerDefaults(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		containerDefaults(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		containerDefaults((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUpResources(spec.Overhead)
	if spec.Resources != nil {
		roundUpResources(spec.Resources.Limits)
		roundUpResources(spec.Resources.Requests)
	}
}

// requestsFromLimits: limits without requests make the requests.
func requestsFromLimits(r *corev1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = q.DeepCopy()
		}
	}
}

// hostNetworkPorts: with the host's network, a container port is a host port.
func hostNetworkPorts(cs []corev1.Container) {
	for i := range cs {
		for j := range cs[i].Ports {
			if cs[i].Ports[j].HostPort == 0 {
				cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
			}
		}
	}
}

// roundUpResources rounds every quantity up to milli precision
// (SetDefaults_ResourceList).
func roundUpResources(l corev1.ResourceList) {
	for name, q := range l {
		q.RoundUp(-3)
		l[name] = q
	}
}

func containerDefaults(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = podutil.DefaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil {
			if vf.FieldRef != nil {
				fieldSelectorDefaults(vf.FieldRef)
			}
			if vf.FileKeyRef != nil && vf.FileKeyRef.Optional == nil {
				vf.FileKeyRef.Optional = ptr.To(false)
			}
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil {
			probeDefaults(p)
		}
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil && h.HTTPGet != nil {
				httpGetDefaults(h.HTTPGet)
			}
		}
	}
	roundUpResources(c.Resources.Limits)
	roundUpResources(c.Resources.Requests)
}

func probeDefaults(p *corev1.Probe) {
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if p.HTTPGet != nil {
		httpGetDefaults(p.HTTPGet)
	}
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = ptr.To("")
	}
}

func httpGetDefaults(a *corev1.HTTPGetAction) {
	if a.Path == "" {
		a.Path = "/"
	}
	if a.Scheme == "" {
		a.Scheme = corev1.URISchemeHTTP
	}
}

func fieldSelectorDefaults(s *corev1.ObjectFieldSelector) {
	if s.APIVersion == "" {
		s.APIVersion = "v1"
	}
}

// allPtrFieldsNil reports whether no volume source is set. Every field of
// VolumeSource is a pointer; reflection keeps this right when the API adds
// one.
func allPtrFieldsNil(vs *corev1.VolumeSource) bool {
	v := reflect.ValueOf(vs).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			return false
		}
	}
	return true
}

func volumeDefaults(v *corev1.Volume) {
	if allPtrFieldsNil(&v.VolumeSource) {
		v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
	vs := &v.VolumeSource
	if vs.Image != nil && vs.Image.PullPolicy == "" {
		vs.Image.PullPolicy = podutil.DefaultPullPolicy(vs.Image.Reference)
	}
	if vs.HostPath != nil && vs.HostPath.Type == nil {
		vs.HostPath.Type = ptr.To(corev1.HostPathUnset)
	}
	if vs.Secret != nil && vs.Secret.DefaultMode == nil {
		vs.Secret.DefaultMode = ptr.To(corev1.SecretVolumeSourceDefaultMode)
	}
	if vs.ConfigMap != nil && vs.ConfigMap.DefaultMode == nil {
		vs.ConfigMap.DefaultMode = ptr.To(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if vs.ISCSI != nil && vs.ISCSI.ISCSIInterface == "" {
		vs.ISCSI.ISCSIInterface = "default"
	}
	if vs.RBD != nil {
		if vs.RBD.RBDPool == "" {
			vs.RBD.RBDPool = "rbd"
		}
		if vs.RBD.RadosUser == "" {
			vs.RBD.RadosUser = "admin"
		}
		if vs.RBD.Keyring == "" {
			vs.RBD.Keyring = "/etc/ceph/keyring"
		}
	}
	if vs.DownwardAPI != nil {
		if vs.DownwardAPI.DefaultMode == nil {
			vs.DownwardAPI.DefaultMode = ptr.To(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range vs.DownwardAPI.Items {
			if vs.DownwardAPI.Items[i].FieldRef != nil {
				fieldSelectorDefaults(vs.DownwardAPI.Items[i].FieldRef)
			}
		}
	}
	if vs.AzureDisk != nil {
		d := vs.AzureDisk
		if d.CachingMode == nil {
			d.CachingMode = ptr.To(corev1.AzureDataDiskCachingReadWrite)
		}
		if d.FSType == nil {
			d.FSType = ptr.To("ext4")
		}
		if d.ReadOnly == nil {
			d.ReadOnly = ptr.To(false)
		}
		if d.Kind == nil {
			d.Kind = ptr.To(corev1.AzureSharedBlobDisk)
		}
	}
	if vs.Projected != nil {
		if vs.Projected.DefaultMode == nil {
			vs.Projected.DefaultMode = ptr.To(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for i := range vs.Projected.Sources {
			s := &vs.Projected.Sources[i]
			if s.DownwardAPI != nil {
				for j := range s.DownwardAPI.Items {
					if s.DownwardAPI.Items[j].FieldRef != nil {
						fieldSelectorDefaults(s.DownwardAPI.Items[j].FieldRef)
					}
				}
			}
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.ExpirationSeconds == nil {
				s.ServiceAccountToken.ExpirationSeconds = ptr.To[int64](3600)
			}
		}
	}
	if vs.ScaleIO != nil {
		if vs.ScaleIO.StorageMode == "" {
			vs.ScaleIO.StorageMode = "ThinProvisioned"
		}
		if vs.ScaleIO.FSType == "" {
			vs.ScaleIO.FSType = "xfs"
		}
	}
	if vs.Ephemeral != nil && vs.Ephemeral.VolumeClaimTemplate != nil {
		s := &vs.Ephemeral.VolumeClaimTemplate.Spec
		if s.VolumeMode == nil {
			s.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}
		roundUpResources(s.Resources.Limits)
		roundUpResources(s.Resources.Requests)
	}
}
