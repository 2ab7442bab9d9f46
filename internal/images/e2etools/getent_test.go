package main

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// The /etc/hosts probe of the DNS specs: `test -n "$(getent hosts NAME)"`.
func TestGetentHosts(t *testing.T) {
	d := startFakeDNS(t, map[string]map[dnsmessage.Type][]dnsmessage.ResourceBody{
		"only-in-dns.ns.svc.cluster.local.": {dnsmessage.TypeA: {&dnsmessage.AResource{A: [4]byte{10, 0, 0, 9}}}},
	})
	useFakeResolver(t, d)
	hosts := t.TempDir() + "/hosts"
	useFile(t, &hostsFile, hosts, "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"+
		"10.244.0.5\tdns-querier-1.dns-test-service.ns.svc.cluster.local\tdns-querier-1\n")
	for _, tc := range []struct {
		key, want string
		code      int
	}{
		{"dns-querier-1", "10.244.0.5      dns-querier-1.dns-test-service.ns.svc.cluster.local dns-querier-1\n", 0},
		{"dns-querier-1.dns-test-service.ns.svc.cluster.local", "10.244.0.5      dns-querier-1.dns-test-service.ns.svc.cluster.local dns-querier-1\n", 0},
		{"localhost", "::1             localhost ip6-localhost\n", 0},
		{"only-in-dns.ns.svc.cluster.local", "10.0.0.9        only-in-dns.ns.svc.cluster.local\n", 0},
		{"10.244.0.5", "10.244.0.5      dns-querier-1.dns-test-service.ns.svc.cluster.local dns-querier-1\n", 0},
		{"nowhere.ns.svc.cluster.local", "", 2},
	} {
		code, out, _ := runTool(t, "", "getent", "hosts", tc.key)
		if code != tc.code || out != tc.want {
			t.Errorf("getent hosts %s: exit %d, %q; want %d, %q", tc.key, code, out, tc.code, tc.want)
		}
	}
}

func TestGetentPasswd(t *testing.T) {
	useFile(t, &passwdFile, t.TempDir()+"/passwd", "root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
	if code, out, _ := runTool(t, "", "getent", "passwd", "1000"); code != 0 || !strings.HasPrefix(out, "user-defined-in-image:") {
		t.Errorf("getent passwd 1000: exit %d, %q", code, out)
	}
	if code, _, _ := runTool(t, "", "getent", "passwd", "nobody"); code != 2 {
		t.Errorf("getent passwd nobody: exit %d, want 2", code)
	}
}

// useFile points *v at a file p with contents for the test.
func useFile(t *testing.T, v *string, p, contents string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(contents), 0o644); err != nil {
		t.Fatal(err)
	}
	old := *v
	*v = p
	t.Cleanup(func() { *v = old })
}
