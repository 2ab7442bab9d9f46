package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nodelet/nodelet/"

// deps lists what pkgs link (go list -deps), module paths relative to the
// module root for the project's own packages.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	var list []string
	for _, p := range strings.Fields(string(out)) {
		list = append(list, strings.TrimPrefix(p, module))
	}
	return list
}

// The layout's promises, checked on the import graph: the daemons stay
// apart (they talk over the bus only), no shipped binary carries test
// helpers, and the CLI stays small (it does not link a daemon, so not
// cAdvisor either).
func TestLinkRules(t *testing.T) {
	daemons := []string{"admission", "devices", "gc", "prober", "runtime", "server", "sources", "status"}
	for _, d := range daemons {
		for _, p := range deps(t, module+"services/"+d) {
			other, ok := strings.CutPrefix(p, "services/")
			if ok && other != d && !strings.HasPrefix(other, d+"/") {
				t.Errorf("services/%s links services/%s: daemons share code through internal/, not each other", d, other)
			}
		}
	}
	for _, bin := range []string{"cmd/nodeletd", "cmd/nodelet", "cmd/nodelet-bench", "cmd/nodelet-pause"} {
		for _, p := range deps(t, module+bin) {
			if p == "testing" || strings.HasPrefix(p, "internal/testenv") || strings.HasSuffix(p, "/bustest") {
				t.Errorf("%s links %s (test helpers stay out of shipped binaries)", bin, p)
			}
		}
	}
	cli := deps(t, module+"cmd/nodelet")
	if i := slices.IndexFunc(cli, func(p string) bool { return strings.HasPrefix(p, "github.com/google/cadvisor") }); i >= 0 {
		t.Errorf("the nodelet CLI links %s", cli[i])
	}
	for _, p := range cli {
		if d, ok := strings.CutPrefix(p, "services/"); ok && !strings.HasSuffix(d, "/client") {
			t.Errorf("the nodelet CLI links the daemon package services/%s", d)
		}
	}
}

// initHeavy are packages whose initialisers build large tables on the heap
// (compiled regular expressions, registries) that nodelet has moved off:
// nodeletd is one executable, so every process of the node runs the
// initialisers of every package it links and keeps what they build, ten
// times over (docs/performance.md, "Memory at rest"). Each entry says what
// it cost per process and what replaced it; one linked again puts that
// back into every process.
var initHeavy = map[string]string{
	// 0.2 MiB of live heap per process (its grammar's regexps);
	// podutil.ParseImage parses with go-containerregistry instead.
	"github.com/distribution/reference": "podutil.ParseImage",
	// k8s.io/apiserver's delegating factories link the webhook plugins
	// and through them CEL, kube-openapi's strfmt and govalidator, the
	// egress selector, apiserver's config scheme and the OpenTelemetry
	// SDK: 1.1 MB of initialiser allocations and 1.2 MiB of anonymous
	// memory per process. nodelet-server builds the same authentication
	// and authorisation from apiserver's small pieces
	// (services/server/webhookauth.go).
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory": "services/server buildAuthn",
	"k8s.io/apiserver/pkg/authorization/authorizerfactory":     "services/server buildAuthz",
	"k8s.io/apiserver/plugin/pkg/authenticator/token/webhook":  "services/server tokenReviewAuthenticator",
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook":           "services/server sarAuthorizer",
	"k8s.io/apiserver/pkg/util/webhook":                        "services/server withExponentialBackoff",
	"k8s.io/apiserver/pkg/apis/apiserver/install":              "nothing: apiserver's own configuration",
	"k8s.io/apiserver/pkg/server/egressselector":               "nothing: apiserver's egress to its webhooks",
	"github.com/google/cel-go/cel":                             "nothing: CEL is for apiserver's match conditions",
	"k8s.io/kube-openapi/pkg/validation/strfmt":                "nothing: OpenAPI validation is apiserver's",
	"go.opentelemetry.io/otel/sdk/trace":                       "nothing: nodelet does not trace",
}

func TestNoInitHeavyPackages(t *testing.T) {
	for _, p := range deps(t, module+"cmd/nodeletd") {
		if instead, ok := initHeavy[p]; ok {
			t.Errorf("nodeletd links %s, whose initialisers every nodelet process would run and keep; use %s", p, instead)
		}
	}
}

// internal/tools/initmem measures what nodeletd's initialisers cost each
// process (docs/performance.md); it is only right while it links what
// nodeletd links.
func TestInitmemLinksWhatNodeletdLinks(t *testing.T) {
	nonStd := func(pkg string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		set := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			set[p] = true
		}
		return set
	}
	nodeletd, initmem := nonStd(module+"cmd/nodeletd"), nonStd(module+"internal/tools/initmem")
	delete(nodeletd, module+"cmd/nodeletd")
	delete(initmem, module+"internal/tools/initmem")
	for p := range nodeletd {
		if !initmem[p] {
			t.Errorf("nodeletd links %s, internal/tools/initmem does not: import what cmd/nodeletd imports", p)
		}
	}
	for p := range initmem {
		if !nodeletd[p] {
			t.Errorf("internal/tools/initmem links %s, nodeletd does not", p)
		}
	}
}
