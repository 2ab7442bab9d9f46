package main

import (
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// The DNS specs' probes (test/e2e/network/dns_common.go) run dig in the
// agnhost and glibc-dns-testing containers and look only at whether its
// output is empty (+noall +answer) or at +short's data.
func TestDigAsTheDNSSpecsRunIt(t *testing.T) {
	d := startFakeDNS(t, map[string]map[dnsmessage.Type][]dnsmessage.ResourceBody{
		"kubernetes.default.svc.cluster.local.": {dnsmessage.TypeA: {&dnsmessage.AResource{A: [4]byte{10, 96, 0, 1}}}},
		"dns-test-service-3.ns.svc.cluster.local.": {
			dnsmessage.TypeCNAME: {&dnsmessage.CNAMEResource{CNAME: name(t, "foo.example.com.")}},
		},
		"1.0.96.10.in-addr.arpa.": {
			dnsmessage.TypePTR: {&dnsmessage.PTRResource{PTR: name(t, "kubernetes.default.svc.cluster.local.")}},
		},
		"_http._tcp.svc.ns.svc.cluster.local.": {
			dnsmessage.TypeSRV: {&dnsmessage.SRVResource{Priority: 0, Weight: 100, Port: 80, Target: name(t, "svc.ns.svc.cluster.local.")}},
		},
	})
	useResolvConf(t, "nameserver 127.0.0.1\nsearch ns.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	p := []string{"-p", d.port}

	for _, tc := range []struct {
		name       string
		args       []string
		wantOut    string // exact output ("" for none)
		wantPrefix string
		wantAsked  []string
	}{
		{
			name:       "a relative name goes down the search list over UDP",
			args:       []string{"+notcp", "+noall", "+answer", "+search", "kubernetes.default", "A"},
			wantPrefix: "kubernetes.default.svc.cluster.local.\t30\tIN\tA\t10.96.0.1\n",
			wantAsked:  []string{"kubernetes.default.ns.svc.cluster.local.", "kubernetes.default.svc.cluster.local."},
		},
		{
			name:       "and over TCP",
			args:       []string{"+tcp", "+noall", "+answer", "+search", "kubernetes.default.svc.cluster.local", "A"},
			wantPrefix: "kubernetes.default.svc.cluster.local.\t30\tIN\tA\t10.96.0.1\n",
		},
		{
			name:      "a name that does not exist answers nothing",
			args:      []string{"+notcp", "+noall", "+answer", "+search", "nothing.here", "A"},
			wantOut:   "",
			wantAsked: []string{"nothing.here.ns.svc.cluster.local.", "nothing.here.svc.cluster.local.", "nothing.here.cluster.local.", "nothing.here."},
		},
		{
			name:      "without +search the name is asked as is",
			args:      []string{"+short", "dns-test-service-3.ns.svc.cluster.local", "CNAME"},
			wantOut:   "foo.example.com.\n",
			wantAsked: []string{"dns-test-service-3.ns.svc.cluster.local."},
		},
		{
			name:    "a PTR by its reverse name",
			args:    []string{"+notcp", "+noall", "+answer", "+search", "1.0.96.10.in-addr.arpa.", "PTR"},
			wantOut: "1.0.96.10.in-addr.arpa.\t30\tIN\tPTR\tkubernetes.default.svc.cluster.local.\n",
		},
		{
			name:    "-x",
			args:    []string{"+short", "-x", "10.96.0.1"},
			wantOut: "kubernetes.default.svc.cluster.local.\n",
		},
		{
			name:    "SRV",
			args:    []string{"+short", "_http._tcp.svc.ns.svc.cluster.local", "SRV"},
			wantOut: "0 100 80 svc.ns.svc.cluster.local.\n",
		},
		{
			name:    "@server",
			args:    []string{"+short", "@127.0.0.1", "kubernetes.default.svc.cluster.local"},
			wantOut: "10.96.0.1\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.names()
			code, out, errOut := runTool(t, "", append([]string{"dig"}, append(p, tc.args...)...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if tc.wantPrefix != "" {
				if !strings.HasPrefix(out, tc.wantPrefix) {
					t.Errorf("output %q, want it to start with %q", out, tc.wantPrefix)
				}
			} else if out != tc.wantOut {
				t.Errorf("output %q, want %q", out, tc.wantOut)
			}
			if tc.wantAsked != nil {
				if got := d.names(); strings.Join(got, " ") != strings.Join(tc.wantAsked, " ") {
					t.Errorf("asked %q, want %q", got, tc.wantAsked)
				}
			}
		})
	}
}

// A server that does not answer is dig's exit 9, and its message on stdout:
// the probes' `check="$(dig ...)" && test -n "$check"` stop at the status.
func TestDigNoServer(t *testing.T) {
	useResolvConf(t, "nameserver 127.0.0.1\n")
	code, out, _ := runTool(t, "", "dig", "-p", "1", "+time=1", "+tries=1", "+noall", "+answer", "kubernetes.default")
	if code != 9 || !strings.Contains(out, "no servers could be reached") {
		t.Errorf("exit %d, output %q; want 9 and dig's message", code, out)
	}
}
