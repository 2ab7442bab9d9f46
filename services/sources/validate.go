package sources

import (
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/bus"
)

// validatePod checks a static pod (defaults and identity applied) the way
// kube-apiserver would check it on create, for the mistakes a manifest can
// hold: names, containers, images, ports, environment, resources, volumes
// and mounts, probes, restart and DNS policy. The API server validates the
// pods it serves; this covers the files and URLs that never pass through
// one. It is not a copy of the API server's validation: what it misses, the
// runtime reports when it cannot run the pod.
func validatePod(pod *corev1.Pod) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if pod.UID != "" && !validUID(string(pod.UID)) {
		// The UID is the pod's key on the bus.
		errs = append(errs, field.Invalid(field.NewPath("metadata", "uid"), pod.UID,
			"must be at most 128 characters of letters, digits, '-', '_' and '.'"))
	} else if err := bus.ValidKey(string(pod.UID)); pod.UID != "" && err != nil {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "uid"), pod.UID,
			"is the pod's key on the bus and "+err.Error()))
	}
	return append(errs, validatePodSpec(&pod.Spec, field.NewPath("spec"))...)
}

// validUID: 1 to 128 letters, digits, '-', '_' or '.'. (Not a regexp:
// `{1,128}` compiles to 128 copies at init, in every daemon's process.)
func validUID(uid string) bool {
	if len(uid) == 0 || len(uid) > 128 {
		return false
	}
	for _, c := range []byte(uid) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func validatePodSpec(spec *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	volumes, verrs := validateVolumes(spec.Volumes, p.Child("volumes"))
	errs = append(errs, verrs...)

	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), "a pod needs at least one container"))
	}
	names := sets.New[string]()
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		cp := p.Child("initContainers").Index(i)
		errs = append(errs, validateContainer(c, cp, names, volumes)...)
		if c.RestartPolicy != nil && *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			errs = append(errs, field.NotSupported(cp.Child("restartPolicy"), *c.RestartPolicy,
				[]string{string(corev1.ContainerRestartPolicyAlways)}))
		}
	}
	for i := range spec.Containers {
		errs = append(errs, validateContainer(&spec.Containers[i], p.Child("containers").Index(i), names, volumes)...)
	}
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(p.Child("ephemeralContainers"), "cannot be set on create"))
	}

	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("restartPolicy"), spec.RestartPolicy,
			[]corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	}
	switch spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault:
	case corev1.DNSNone:
		if spec.DNSConfig == nil || len(spec.DNSConfig.Nameservers) == 0 {
			errs = append(errs, field.Required(p.Child("dnsConfig", "nameservers"), "must provide at least one DNS nameserver when dnsPolicy is None"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("dnsPolicy"), spec.DNSPolicy,
			[]corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}))
	}
	if spec.TerminationGracePeriodSeconds != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(*spec.TerminationGracePeriodSeconds, p.Child("terminationGracePeriodSeconds"))...)
	}
	if spec.ActiveDeadlineSeconds != nil && *spec.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *spec.ActiveDeadlineSeconds, "must be greater than 0"))
	}
	errs = append(errs, metav1validation.ValidateLabels(spec.NodeSelector, p.Child("nodeSelector"))...)
	if spec.Hostname != "" {
		errs = append(errs, dnsLabel(spec.Hostname, p.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		errs = append(errs, dnsLabel(spec.Subdomain, p.Child("subdomain"))...)
	}
	errs = append(errs, validateHostnameOverride(spec, p.Child("hostnameOverride"))...)
	errs = append(errs, validateResourceList(spec.Overhead, p.Child("overhead"))...)
	return errs
}

// validateHostnameOverride is the API's validatePodHostName: a DNS
// subdomain of at most 64 characters, not beside setHostnameAsFQDN or
// hostNetwork.
func validateHostnameOverride(spec *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.HostnameOverride == nil {
		return nil
	}
	if spec.SetHostnameAsFQDN != nil && *spec.SetHostnameAsFQDN {
		errs = append(errs, field.Forbidden(p, "may not be specified when setHostnameAsFQDN is true"))
	}
	if spec.HostNetwork {
		errs = append(errs, field.Forbidden(p, "may not be specified when hostNetwork is true"))
	}
	if len(*spec.HostnameOverride) > 64 {
		errs = append(errs, field.TooLong(p, "", 64))
	}
	for _, msg := range validation.IsDNS1123Subdomain(*spec.HostnameOverride) {
		errs = append(errs, field.Invalid(p, *spec.HostnameOverride, msg))
	}
	return errs
}

func dnsLabel(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// validateVolumes checks names and sources and returns the set of names.
func validateVolumes(vols []corev1.Volume, p *field.Path) (sets.Set[string], field.ErrorList) {
	var errs field.ErrorList
	names := sets.New[string]()
	for i := range vols {
		v := &vols[i]
		vp := p.Index(i)
		if v.Name == "" {
			errs = append(errs, field.Required(vp.Child("name"), ""))
		} else {
			errs = append(errs, dnsLabel(v.Name, vp.Child("name"))...)
			if names.Has(v.Name) {
				errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
			}
			names.Insert(v.Name)
		}
		if n := setPointerFields(&v.VolumeSource); n > 1 {
			errs = append(errs, field.Forbidden(vp, "may not specify more than 1 volume type"))
		}
		if v.HostPath != nil && v.HostPath.Path == "" {
			errs = append(errs, field.Required(vp.Child("hostPath", "path"), ""))
		}
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() < 0 {
			errs = append(errs, field.Invalid(vp.Child("emptyDir", "sizeLimit"), v.EmptyDir.SizeLimit.String(), "must be greater than or equal to 0"))
		}
	}
	return names, errs
}

func setPointerFields(vs *corev1.VolumeSource) int {
	n := 0
	v := reflect.ValueOf(vs).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

func validateContainer(c *corev1.Container, p *field.Path, names, volumes sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		errs = append(errs, dnsLabel(c.Name, p.Child("name"))...)
		if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		names.Insert(c.Name)
	}
	if c.Image == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	} else if strings.TrimSpace(c.Image) != c.Image {
		errs = append(errs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	switch c.TerminationMessagePolicy {
	case corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError:
	default:
		errs = append(errs, field.NotSupported(p.Child("terminationMessagePolicy"), c.TerminationMessagePolicy,
			[]corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}))
	}
	errs = append(errs, validatePorts(c.Ports, p.Child("ports"))...)
	for i, e := range c.Env {
		ep := p.Child("env").Index(i).Child("name")
		if e.Name == "" {
			errs = append(errs, field.Required(ep, ""))
			continue
		}
		for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(ep, e.Name, msg))
		}
	}
	errs = append(errs, validateResources(&c.Resources, p.Child("resources"))...)
	mounts := sets.New[string]()
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		} else if mounts.Has(m.MountPath) {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
		}
		mounts.Insert(m.MountPath)
		if hasDotDot(m.SubPath) {
			errs = append(errs, field.Invalid(mp.Child("subPath"), m.SubPath, "must not contain '..'"))
		}
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe != nil {
			errs = append(errs, validateProbe(pr.probe, pr.name != "readinessProbe", p.Child(pr.name))...)
		}
	}
	return errs
}

func hasDotDot(path string) bool {
	for _, part := range strings.Split(path, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func validatePorts(ports []corev1.ContainerPort, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, port := range ports {
		pp := p.Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		if port.ContainerPort == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
			}
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol,
				[]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}))
		}
	}
	return errs
}

func validateResourceList(l corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range l {
		np := p.Key(string(name))
		for _, msg := range content.IsQualifiedName(string(name)) {
			errs = append(errs, field.Invalid(np, name, msg))
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(np, q.String(), "must be greater than or equal to 0"))
		}
	}
	return errs
}

func validateResources(r *corev1.ResourceRequirements, p *field.Path) field.ErrorList {
	errs := validateResourceList(r.Limits, p.Child("limits"))
	errs = append(errs, validateResourceList(r.Requests, p.Child("requests"))...)
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func validateProbe(pr *corev1.Probe, successMustBeOne bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	handlers := 0
	for _, set := range []bool{pr.Exec != nil, pr.HTTPGet != nil, pr.TCPSocket != nil, pr.GRPC != nil} {
		if set {
			handlers++
		}
	}
	if handlers != 1 {
		errs = append(errs, field.Required(p, "must specify exactly one handler type (exec, httpGet, tcpSocket or grpc)"))
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"initialDelaySeconds", pr.InitialDelaySeconds}, {"timeoutSeconds", pr.TimeoutSeconds},
		{"periodSeconds", pr.PeriodSeconds}, {"successThreshold", pr.SuccessThreshold},
		{"failureThreshold", pr.FailureThreshold},
	} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(f.v), p.Child(f.name))...)
	}
	if successMustBeOne && pr.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
	}
	if pr.TerminationGracePeriodSeconds != nil && *pr.TerminationGracePeriodSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *pr.TerminationGracePeriodSeconds, "must be greater than 0"))
	}
	return errs
}
