package server

import (
	"net/http/httptest"
	"reflect"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// TestRequestAttributes holds the kubelet's table
// (pkg/kubelet/server/auth_test.go, fine-grained authz on).
func TestRequestAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{"GET", "/containerLogs/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/exec/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/portForward/ns/pod", "create", []string{"proxy"}},
		{"POST", "/run/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/stats/", "get", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/cadvisor", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"POST", "/checkpoint/ns/pod/c", "create", []string{"checkpoint"}},
		{"GET", "/spec/", "get", []string{"proxy"}},
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/flagz", "get", []string{"configz"}},
		{"GET", "/statusz", "get", []string{"statusz"}},
		{"PUT", "/podsfoo", "update", []string{"proxy"}},
		{"PATCH", "/metricsfoo", "patch", []string{"proxy"}},
		{"DELETE", "/statsfoo", "delete", []string{"proxy"}},
		{"HEAD", "/pods", "", []string{"pods", "proxy"}},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			u := &user.DefaultInfo{Name: "alice"}
			attrs := requestAttributes("node-a", u, httptest.NewRequest(tc.method, tc.path, nil))
			var subs []string
			for _, a := range attrs {
				subs = append(subs, a.GetSubresource())
				if a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "node-a" ||
					a.GetAPIVersion() != "v1" || a.GetAPIGroup() != "" || a.GetNamespace() != "" ||
					!a.IsResourceRequest() || a.GetPath() != tc.path || a.GetUser().GetName() != "alice" {
					t.Errorf("attributes = %+v", a)
				}
			}
			if !reflect.DeepEqual(subs, tc.subresources) {
				t.Errorf("subresources = %v, want %v", subs, tc.subresources)
			}
		})
	}
}

func TestIsSubpath(t *testing.T) {
	for _, tc := range []struct {
		sub, path string
		want      bool
	}{
		{"/stats", "/stats/", true},
		{"/stats/summary", "/stats/", true},
		{"/statsfoo", "/stats/", false},
		{"/pods", "/pods", true},
		{"/pods/x", "/pods", true},
		{"/podsx", "/pods", false},
		{"/", "/pods", false},
	} {
		if got := isSubpath(tc.sub, tc.path); got != tc.want {
			t.Errorf("isSubpath(%q, %q) = %v, want %v", tc.sub, tc.path, got, tc.want)
		}
	}
}
