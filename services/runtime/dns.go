package runtime

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// podHostname is the kubelet's GeneratePodHostNameAndDomain plus
// setHostnameAsFQDN: spec.hostname or the pod name (at most 63 characters),
// inside <subdomain>.<ns>.svc.<clusterDomain> when a subdomain is set.
func podHostname(pod *corev1.Pod, clusterDomain string) (string, error) {
	host := pod.Name
	if pod.Spec.Hostname != "" {
		host = pod.Spec.Hostname
	}
	if len(host) > 63 {
		host = strings.TrimRight(host[:63], "-.")
	}
	domain := ""
	if pod.Spec.Subdomain != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	if pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN && domain != "" {
		fqdn := host + "." + domain
		if len(fqdn) > 64 {
			return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (64 characters is the max, %d characters requested)", fqdn, len(fqdn))
		}
		return fqdn, nil
	}
	return host, nil
}
