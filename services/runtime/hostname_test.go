package runtime

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Issue 32: spec.hostnameOverride, as the kubelet's
// GeneratePodHostNameAndDomain (HostnameOverride GA in 1.37): the
// override is the hostname, with no domain, whatever hostname and
// subdomain say; the sandbox's hostname and /etc/hosts both use it.
func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 60) + ".b-c.d"
	for _, tc := range []struct {
		name                 string
		hostname, subdomain  string
		override             *string
		fqdn                 bool
		wantHost, wantDomain string
		wantKernel           string
		wantErr              string
	}{
		{name: "pod name", wantHost: "web", wantKernel: "web"},
		{name: "hostname and subdomain", hostname: "h", subdomain: "s", wantHost: "h", wantDomain: "s.default.svc.cluster.local", wantKernel: "h"},
		{name: "setHostnameAsFQDN", hostname: "h", subdomain: "s", fqdn: true, wantHost: "h", wantDomain: "s.default.svc.cluster.local",
			wantKernel: "h.s.default.svc.cluster.local"},
		{name: "override, a DNS subdomain", override: ptr.To("override.example.host"), wantHost: "override.example.host", wantKernel: "override.example.host"},
		{name: "override beats hostname", hostname: "custom-host", override: ptr.To("override-host"), wantHost: "override-host", wantKernel: "override-host"},
		{name: "override drops the subdomain", subdomain: "t", override: ptr.To("override-host"), wantHost: "override-host", wantKernel: "override-host"},
		{name: "override truncated to 63", override: &long, wantHost: strings.Repeat("a", 60) + ".b", wantKernel: strings.Repeat("a", 60) + ".b"},
		{name: "override not a DNS subdomain", override: ptr.To("Not-RFC1123"), wantErr: `pod HostnameOverride "Not-RFC1123" is not a valid DNS subdomain`},
		{name: "hostname not a DNS label", hostname: "a.b", wantErr: `pod Hostname "a.b" is not a valid DNS label`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("web", busybox("a", ""))
			pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.HostnameOverride = tc.hostname, tc.subdomain, tc.override
			if tc.fqdn {
				pod.Spec.SetHostnameAsFQDN = ptr.To(true)
			}
			host, domain, err := podHostname(pod, "cluster.local")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if _, serr := testManager(t).sandboxConfig(pod, 0); serr == nil {
					t.Fatal("sandbox config made for an invalid hostname")
				}
				return
			}
			if err != nil || host != tc.wantHost || domain != tc.wantDomain {
				t.Fatalf("podHostname = %q, %q, %v; want %q, %q", host, domain, err, tc.wantHost, tc.wantDomain)
			}
			cfg, err := testManager(t).sandboxConfig(pod, 0)
			if err != nil || cfg.Hostname != tc.wantKernel {
				t.Fatalf("sandbox hostname %q (%v), want %q", cfg.GetHostname(), err, tc.wantKernel)
			}
		})
	}

	// /etc/hosts names the override alone, as the kubelet's
	// managedHostsFileContent does without a domain.
	m := testManager(t)
	pod := newPod("web", busybox("a", ""))
	pod.Spec.Subdomain, pod.Spec.HostnameOverride = "t", ptr.To("override.example.host")
	p, err := m.etcHosts(pod, &sandboxInfo{IPs: []string{"10.88.0.7"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "\n10.88.0.7\toverride.example.host\n") || strings.Contains(string(b), "svc") {
		t.Fatalf("/etc/hosts:\n%s", b)
	}
}

// spec.hostAliases: entries added to the managed /etc/hosts, after the
// pod's own, as the kubelet's hostsEntriesFromHostAliases; a host-network
// pod gets the node's file with them.
func TestHostAliases(t *testing.T) {
	m := testManager(t)
	for _, hostNetwork := range []bool{false, true} {
		pod := newPod("web", busybox("a", ""))
		pod.Spec.HostNetwork = hostNetwork
		pod.Spec.HostAliases = []corev1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"foo.local", "bar.local"}}, {IP: "192.0.2.2", Hostnames: []string{"baz"}}}
		p, err := m.etcHosts(pod, &sandboxInfo{IPs: []string{"10.88.0.7"}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		want := "\n# Entries added by HostAliases.\n192.0.2.1\tfoo.local\tbar.local\n192.0.2.2\tbaz\n"
		if !strings.HasSuffix(string(b), want) {
			t.Fatalf("hostNetwork=%v /etc/hosts:\n%s", hostNetwork, b)
		}
	}
}
