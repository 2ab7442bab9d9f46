package kubeletcompat

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"github.com/nodelet/nodelet/internal/config"
)

// FlagEntry is one flag of the kubelet's that is not a KubeletConfiguration
// field, and what nodelet does with it; the config flags follow their
// field (Table).
type FlagEntry struct {
	Name  string
	Class Class
	// Key is the nodelet key a honoured flag sets.
	Key, Note string
	// apply runs when the flag is given (always, with always).
	apply  func(l *Loaded, c *config.Config) error
	always bool
}

func refusedWhenSet(name, why string, given func(*Flags) bool) FlagEntry {
	return FlagEntry{Name: name, Class: Refused, Note: why, apply: func(l *Loaded, _ *config.Config) error {
		if given(l.Flags) {
			return fmt.Errorf("--%s: %s", name, why)
		}
		return nil
	}}
}

// NodeFlags are the kubelet's own flags (KubeletFlags, its global flags)
// and the removed ones nodelet takes.
var NodeFlags = []FlagEntry{
	{Name: "config", Class: Honoured, Note: "the KubeletConfiguration, decoded strictly, defaulted as the kubelet's; flags override it"},
	{Name: "config-dir", Class: Honoured, Note: "drop-ins (`*.conf`, subdirectories too) merged in lexical order (JSON merge patch), as the kubelet"},
	{Name: "kubeconfig", Class: Honoured, Key: "node.kubeconfig", apply: func(l *Loaded, c *config.Config) error { c.Node.Kubeconfig = l.Flags.Kubeconfig; return nil }},
	{Name: "bootstrap-kubeconfig", Class: Honoured, Key: "node.bootstrapKubeconfig", apply: func(l *Loaded, c *config.Config) error {
		c.Node.BootstrapKubeconfig = l.Flags.BootstrapKubeconfig
		return nil
	}},
	{Name: "hostname-override", Class: Honoured, Key: "node.name", Note: "trimmed and lower-cased, as the kubelet", apply: func(l *Loaded, c *config.Config) error {
		if n := strings.ToLower(strings.TrimSpace(l.Flags.HostnameOverride)); n != "" {
			c.Node.Name = n
		}
		return nil
	}},
	{Name: "node-ip", Class: Honoured, Key: "node.address", Note: "one address; 0.0.0.0 picks one as nodelet does; dual-stack pairs and :: are refused", apply: func(l *Loaded, c *config.Config) error {
		ip := strings.TrimSpace(l.Flags.NodeIP)
		if strings.Contains(ip, ",") {
			return fmt.Errorf("--node-ip %s: nodelet has one node address (node.address), not a dual-stack pair", ip)
		}
		a, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			return fmt.Errorf("--node-ip %q is not an IP address", ip)
		case a.Is6() && a.IsUnspecified():
			return errors.New("--node-ip ::: nodelet prefers no address family (it picks the first non-loopback address)")
		case a.IsUnspecified():
			c.Node.Address = ""
		default:
			c.Node.Address = a.String()
		}
		return nil
	}},
	{Name: "root-dir", Class: Honoured, Key: "node.stateDir", Note: "default /var/lib/kubelet: nodelet keeps its state where the kubelet did (pki/ included), and node.rootDir (device-plugins/kubelet.sock) is the same directory; the nodelet configuration is written there as nodelet.yaml", always: true,
		apply: func(l *Loaded, c *config.Config) error {
			c.Node.StateDir = filepath.Clean(l.Flags.RootDir)
			c.Node.RootDir = c.Node.StateDir
			return nil
		}},
	{Name: "cert-dir", Class: Refused, Note: "nodelet's certificates are in <root-dir>/pki: only that is taken (and a --root-dir other than the default needs it said)", always: true,
		apply: func(l *Loaded, _ *config.Config) error {
			want := filepath.Join(filepath.Clean(l.Flags.RootDir), "pki")
			if filepath.Clean(l.Flags.CertDir) != want {
				return fmt.Errorf("--cert-dir %s: nodelet keeps its certificates in <root-dir>/pki (%s)", l.Flags.CertDir, want)
			}
			return nil
		}},
	{Name: "cloud-provider", Class: Honoured, Key: "node.taints", Note: `"external" registers the node with the taint node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule, as the kubelet; "" nothing; others refused`,
		apply: func(l *Loaded, c *config.Config) error {
			switch l.Flags.CloudProvider {
			case "":
			case "external":
				c.Node.Taints = append(c.Node.Taints, config.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: "NoSchedule"})
			default:
				return fmt.Errorf("--cloud-provider %q: only \"external\" (or none)", l.Flags.CloudProvider)
			}
			return nil
		}},
	{Name: "seccomp-default", Class: Honoured, Key: "runtime.seccompDefault", apply: func(l *Loaded, c *config.Config) error {
		c.Runtime.SeccompDefault = c.Runtime.SeccompDefault || l.Flags.SeccompDefault
		return nil
	}},
	{Name: "node-labels", Class: Honoured, Key: "node.labels", Note: "checked as the kubelet checks them (kubernetes.io and k8s.io labels restricted)", apply: func(l *Loaded, c *config.Config) error {
		c.Node.Labels = l.Flags.NodeLabels
		return nil
	}},
	refusedWhenSet("lock-file", "nodelet's daemons lock their own files under the state directory", func(f *Flags) bool { return f.LockFile != "" }),
	refusedWhenSet("exit-on-lock-contention", "nodelet's daemons lock their own files under the state directory", func(f *Flags) bool { return f.ExitOnLockContention }),
	refusedWhenSet("runtime-cgroups", "nodelet does not move the container runtime into a cgroup", func(f *Flags) bool { return f.RuntimeCgroups != "" }),
	{Name: "image-credential-provider-config", Class: Honoured, Key: "runtime.imageCredentialProviderConfig", Note: "a file or a directory of them, as the kubelet's, with the service-account token mode (tokenAttributes)",
		apply: func(l *Loaded, c *config.Config) error {
			p, err := filepath.Abs(l.Flags.ImageCredentialProviderConfig)
			c.Runtime.ImageCredentialProviderConfig = p
			return err
		}},
	{Name: "image-credential-provider-bin-dir", Class: Honoured, Key: "runtime.imageCredentialProviderBinDir",
		apply: func(l *Loaded, c *config.Config) error {
			p, err := filepath.Abs(l.Flags.ImageCredentialProviderBinDir)
			c.Runtime.ImageCredentialProviderBinDir = p
			return err
		}},
	refusedWhenSet("housekeeping-interval", "nodelet has no cAdvisor housekeeping to tune (only 10s, its default, is taken)", func(f *Flags) bool { return f.HousekeepingInterval != newFlags().HousekeepingInterval }),
	{Name: "minimum-container-ttl-duration", Class: Honoured, Key: "gc.minAge", Note: "deprecated, as in the kubelet (the warning is the kubelet's)", apply: func(l *Loaded, c *config.Config) error {
		c.GC.MinAge = l.Flags.MinimumContainerTTL
		return nil
	}},
	{Name: "maximum-dead-containers-per-container", Class: Honoured, Key: "gc.maxPerPodContainer", Note: "deprecated, as in the kubelet", apply: func(l *Loaded, c *config.Config) error {
		c.GC.MaxPerPodContainer = int(l.Flags.MaxPerPodContainer)
		return nil
	}},
	{Name: "maximum-dead-containers", Class: Honoured, Key: "gc.maxContainers", Note: "deprecated, as in the kubelet", apply: func(l *Loaded, c *config.Config) error {
		c.GC.MaxContainers = int(l.Flags.MaxContainers)
		return nil
	}},
	refusedWhenSet("experimental-mounter-path", "deprecated; nodelet mounts with the host's mount", func(f *Flags) bool { return f.ExperimentalMounterPath != "" }),
	refusedWhenSet("experimental-allocatable-ignore-eviction", "deprecated; nodelet's allocatable always counts evictionHard", func(f *Flags) bool { return f.ExperimentalAllocatableIgnoreEviction }),
	{Name: "pod-infra-container-image", Class: Accepted, Note: removedFlags["pod-infra-container-image"] + ": the sandbox image is runtime.sandboxImage"},
	{Name: "container-runtime", Class: Accepted, Note: removedFlags["container-runtime"] + "; any other value refused", apply: func(l *Loaded, _ *config.Config) error {
		if l.Flags.ContainerRuntime != "remote" {
			return fmt.Errorf("--container-runtime %q: only \"remote\" (the flag is gone from the kubelet)", l.Flags.ContainerRuntime)
		}
		return nil
	}},
	{Name: "version", Class: Honoured, Note: "prints Kubernetes v1.37.2+nodelet.<nodelet's version> (the Kubernetes version whose kubelet nodelet follows, nodelet's as build metadata; the Node's kubeletVersion too) and exits; --version=raw: more"},
	{Name: "help", Class: Honoured, Note: "prints the flags and exits"},
}

// Map maps the loaded kubelet configuration and flags onto nodelet's
// configuration: every field and flag honoured, or refused by name (all
// refusals in one error). warnings are the accepted fields set to other
// than their default.
func Map(l *Loaded) (c *config.Config, warnings []string, err error) {
	c = config.Defaults()
	var errs []error
	def := &kubeletv1beta1.KubeletConfiguration{}
	setDefaults(def, l.Gates)
	got, want := reflect.ValueOf(l.Config).Elem(), reflect.ValueOf(def).Elem()
	for _, f := range Table {
		switch {
		case f.Class == Honoured:
			if err := f.set(l.Config, c); err != nil {
				errs = append(errs, err)
			}
		case f.check != nil:
			if err := f.check(l.Config); err != nil {
				errs = append(errs, err)
			}
		default:
			g, _ := lookupField(got, f.Path)
			w, _ := lookupField(want, f.Path)
			if same(g, w) {
				continue
			}
			if f.Class == Accepted {
				warnings = append(warnings, fmt.Sprintf("KubeletConfiguration %s: %s; taken, with no effect", f.Path, f.Note))
				continue
			}
			errs = append(errs, fmt.Errorf("KubeletConfiguration %s: %s is not supported by nodelet: %s (only the kubelet's default, %s)",
				f.Path, show(g), f.Note, show(w)))
		}
	}
	for _, f := range NodeFlags {
		if f.apply != nil && (f.always || l.Given(f.Name)) {
			if err := f.apply(l, c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return c, warnings, errors.Join(errs...)
}

func show(v reflect.Value) string {
	if empty(v) {
		return "unset"
	}
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return fmt.Sprintf("%q", s.String())
	}
	return fmt.Sprintf("%v", v.Interface())
}

// validateNodeLabels is the kubelet's ValidateKubeletFlags: labels must
// be valid, and those in the kubernetes.io and k8s.io namespaces must be
// ones a kubelet may set.
func validateNodeLabels(labels map[string]string) error {
	var unknown, invalid []string
	for k, v := range labels {
		if isKubernetesLabel(k) && !kubeletapis.IsKubeletLabel(k) {
			unknown = append(unknown, k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			invalid = append(invalid, fmt.Sprintf("'%s' - %s", k, strings.Join(errs, ", ")))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			invalid = append(invalid, fmt.Sprintf("'%s' - %s", v, strings.Join(errs, ", ")))
		}
	}
	sort.Strings(unknown)
	sort.Strings(invalid)
	if len(unknown) > 0 {
		return fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %v\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (%s) or be in the specifically allowed set (%s)",
			unknown, strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", "))
	}
	if len(invalid) > 0 {
		return fmt.Errorf("invalid node labels: %s", strings.Join(invalid, "; "))
	}
	return nil
}

func isKubernetesLabel(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	return ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
}
