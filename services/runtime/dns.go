package runtime

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Limits of a pod's resolv.conf, the kubelet's.
const (
	maxDNSNameservers = 3
	maxDNSSearchPaths = 32
	defaultNdots      = "ndots:5"
)

// dnsSettings are the node's DNS settings (node.clusterDNS,
// node.clusterDomain, node.resolvConf).
type dnsSettings struct {
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string
}

// hostResolv is what the node's resolv.conf says.
type hostResolv struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

func readResolvConf(path string) (hostResolv, error) {
	var r hostResolv
	if path == "" {
		return r, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return r, fmt.Errorf("node.resolvConf %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			r.Nameservers = append(r.Nameservers, f[1])
		case "search":
			r.Searches = append([]string(nil), f[1:]...)
		case "domain":
			r.Searches = []string{f[1]}
		case "options":
			r.Options = append(r.Options, f[1:]...)
		}
	}
	return r, sc.Err()
}

// podDNS is the kubelet's GetPodDNS: the resolv.conf a pod gets by its
// dnsPolicy and dnsConfig.
func podDNS(pod *corev1.Pod, s dnsSettings) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault // ClusterFirst on the host network means the node's DNS
	}
	if policy == corev1.DNSClusterFirstWithHostNet {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && len(s.ClusterDNS) == 0 {
		policy = corev1.DNSDefault // no cluster DNS configured: fall back, as the kubelet does
	}
	cfg := &runtimeapi.DNSConfig{}
	switch policy {
	case corev1.DNSNone:
	case corev1.DNSDefault, corev1.DNSClusterFirst:
		host, err := readResolvConf(s.ResolvConf)
		if err != nil {
			return nil, err
		}
		if policy == corev1.DNSDefault {
			cfg.Servers, cfg.Searches, cfg.Options = host.Nameservers, host.Searches, host.Options
			break
		}
		domain := s.ClusterDomain
		cfg.Servers = append([]string(nil), s.ClusterDNS...)
		cfg.Searches = append([]string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}, host.Searches...)
		cfg.Options = []string{defaultNdots}
	default:
		return nil, fmt.Errorf("dnsPolicy %q is not supported", policy)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = append(cfg.Servers, dc.Nameservers...)
		cfg.Searches = append(cfg.Searches, dc.Searches...)
		cfg.Options = mergeDNSOptions(cfg.Options, dc.Options)
	}
	cfg.Servers = dedupe(cfg.Servers)
	cfg.Searches = dedupe(cfg.Searches)
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
	}
	if len(cfg.Searches) > maxDNSSearchPaths {
		cfg.Searches = cfg.Searches[:maxDNSSearchPaths]
	}
	return cfg, nil
}

// mergeDNSOptions overrides options of the same name with the pod's.
func mergeDNSOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	out := slices.Clone(base)
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil {
			opt += ":" + *o.Value
		}
		replaced := false
		for i, b := range out {
			if n, _, _ := strings.Cut(b, ":"); n == o.Name {
				out[i], replaced = opt, true
			}
		}
		if !replaced {
			out = append(out, opt)
		}
	}
	return out
}

func dedupe(in []string) []string {
	var out []string
	for _, s := range in {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// podHostname is the kubelet's GeneratePodHostNameAndDomain
// (kubelet_pods.go; HostnameOverride is GA and locked on in 1.37): the
// pod's hostname and its domain. spec.hostnameOverride, a DNS subdomain,
// is the hostname as it is (at most 63 characters) with no domain, so
// subdomain and setHostnameAsFQDN do not apply (the API refuses the
// latter beside it); else spec.hostname or the pod name (at most 63
// characters), in <subdomain>.<ns>.svc.<clusterDomain> when a subdomain
// is set. Names the API would refuse are errors, as the kubelet's.
func podHostname(pod *corev1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		h, err := truncateHostname(pod.Name, *o)
		return h, "", err
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		hostname = pod.Spec.Hostname
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if pod.Spec.Subdomain != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return hostname, domain, nil
}

// truncateHostname is the kubelet's truncatePodHostnameIfNeeded: at most
// 63 characters (the kernel's 64 bytes with the terminating NUL), not
// ending in '-' or '.'.
func truncateHostname(podName, hostname string) (string, error) {
	const maxLen = 63
	if len(hostname) <= maxLen {
		return hostname, nil
	}
	truncated := strings.TrimRight(hostname[:maxLen], "-.")
	if truncated == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return truncated, nil
}

// kernelHostname is the kubelet's GetNodenameForKernel: the sandbox's
// hostname, the FQDN with setHostnameAsFQDN (at most 64 characters).
func kernelHostname(pod *corev1.Pod, hostname, domain string) (string, error) {
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	const fqdnMaxLen = 64
	fqdn := hostname + "." + domain
	if len(fqdn) > fqdnMaxLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, fqdnMaxLen, len(fqdn))
	}
	return fqdn, nil
}
