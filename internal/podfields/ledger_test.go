package podfields_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/podfields"
	"github.com/nodelet/nodelet/internal/podfields/docgen"
)

const repoRoot = "../.."

// Issue 32: every field of the Pod API the node receives is classified.
// A field added by a newer k8s.io/api, or removed from the table, fails
// here.
func TestLedgerCoversEveryField(t *testing.T) {
	reached := map[string]bool{}
	for _, f := range podfields.Fields() {
		if reached[f.Key] {
			t.Errorf("%s reached twice", f.Key)
		}
		reached[f.Key] = true
		if _, ok := podfields.Lookup(f.Key); !ok {
			t.Errorf("%s (%s, at %s) is not in the field ledger: classify it in internal/podfields as honoured (with its test), refused or not the node's",
				f.Key, f.Type.Type, f.Path)
		}
	}
	seen := map[string]bool{}
	for _, e := range podfields.Table() {
		if seen[e.Field] {
			t.Errorf("%s classified twice", e.Field)
		}
		seen[e.Field] = true
		if !reached[e.Field] {
			t.Errorf("%s is in the ledger but no pod field reaches it (gone from k8s.io/api, or under a refused field)", e.Field)
		}
		switch e.Class {
		case podfields.Honoured:
			if len(e.Tests) == 0 {
				t.Errorf("%s is honoured without a test", e.Field)
			}
		case podfields.Refused, podfields.NotNode:
			if e.Note == "" {
				t.Errorf("%s is %s without saying why", e.Field, e.Class)
			}
			if (e.Unless != "") != (len(e.Tests) > 0) {
				t.Errorf("%s: a refusal lifted by a runtime feature (%q) names the tests of the field honoured (%v), and only it", e.Field, e.Unless, e.Tests)
			}
		default:
			t.Errorf("%s: no class", e.Field)
		}
	}
	c := docgen.Counts()
	t.Logf("%d fields: %d honoured, %d refused, %d not the node's", len(podfields.Table()), c[podfields.Honoured], c[podfields.Refused], c[podfields.NotNode])
}

// Every test the ledger names exists, and at least one of an honoured
// field's tests is in a package whose tests speak of the field (its Go
// name).
func TestLedgerTestsExist(t *testing.T) {
	tests, err := docgen.Tests(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	goNames := map[string]string{}
	for _, f := range podfields.Fields() {
		goNames[f.Key] = f.GoName
	}
	sources := map[string]string{}
	source := func(file string) string {
		if s, ok := sources[file]; ok {
			return s
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		sources[file] = string(b)
		return sources[file]
	}
	for _, e := range podfields.Table() {
		if e.Class != podfields.Honoured && e.Unless == "" {
			continue
		}
		word := regexp.MustCompile(`\b` + regexp.QuoteMeta(goNames[e.Field]) + `\b`)
		spoken := false
		for _, name := range e.Tests {
			files := tests[name]
			if len(files) == 0 {
				t.Errorf("%s: test %s does not exist", e.Field, name)
				continue
			}
			// The test's package: its helpers build the pods.
			for _, f := range files {
				pkg, _ := filepath.Glob(filepath.Join(repoRoot, filepath.Dir(f), "*_test.go"))
				for _, p := range pkg {
					rel, _ := filepath.Rel(repoRoot, p)
					spoken = spoken || word.MatchString(source(rel))
				}
			}
		}
		if !spoken {
			t.Errorf("%s: none of %v is in a package whose tests mention %s", e.Field, e.Tests, goNames[e.Field])
		}
	}
}

// docs/pod-fields.md is the ledger as it is.
func TestPodFieldsDoc(t *testing.T) {
	tests, err := docgen.Tests(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := docgen.Markdown(tests)
	got, err := os.ReadFile(filepath.Join(repoRoot, "docs", "pod-fields.md"))
	if err != nil || string(got) != want {
		t.Fatalf("docs/pod-fields.md is stale (%v): run go generate ./internal/podfields/", err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil || !strings.Contains(string(readme), "docs/pod-fields.md") {
		t.Fatalf("README.md does not link docs/pod-fields.md (%v)", err)
	}
}

// The ephemeral containers' fields follow the containers' (the runtime
// runs one as a Container), but for those the API refuses for them.
func TestEphemeralFieldsFollowContainers(t *testing.T) {
	for _, name := range []string{"env", "volumeMounts", "securityContext", "volumeDevices"} {
		c, _ := podfields.Lookup("Container." + name)
		e, ok := podfields.Lookup("EphemeralContainerCommon." + name)
		if !ok || e.Class != c.Class {
			t.Errorf("EphemeralContainerCommon.%s: %v, Container's is %v", name, e.Class, c.Class)
		}
	}
	if e, _ := podfields.Lookup("EphemeralContainerCommon.lifecycle"); e.Class != podfields.NotNode {
		t.Errorf("EphemeralContainerCommon.lifecycle: %v, want not the node's (the API refuses it)", e.Class)
	}
	if e, _ := podfields.Lookup("EphemeralContainerCommon.env"); !slices.Contains(e.Tests, "TestEphemeralContainerStartsInRunningPod") {
		t.Errorf("EphemeralContainerCommon.env tests %v", e.Tests)
	}
}
