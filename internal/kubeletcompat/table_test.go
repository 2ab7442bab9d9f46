package kubeletcompat

import (
	"github.com/spf13/pflag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// leafPaths walks KubeletConfiguration: a path the table names covers
// everything under it; any other struct is walked into; anything else is
// a leaf the table must name.
func leafPaths(t reflect.Type, prefix string, named map[string]bool, out *[]string, all map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous { // TypeMeta: apiVersion and kind
			continue
		}
		path := prefix + jsonName(f)
		all[path] = true
		if named[path] {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[metav1.Duration]() && ft != reflect.TypeFor[logsapi.TimeOrMetaDuration]() {
			leafPaths(ft, path+".", named, out, all)
			continue
		}
		*out = append(*out, path)
	}
}

// Every field of KubeletConfiguration is in the table, so that a
// k8s.io/kubelet upgrade fails here until its new fields are classified.
func TestTableCoversKubeletConfiguration(t *testing.T) {
	named := map[string]bool{}
	for _, f := range Table {
		if named[f.Path] {
			t.Errorf("%s is in the table twice", f.Path)
		}
		named[f.Path] = true
		// featureGates and failCgroupV1 are honoured by the loader's own
		// checks, onto no single key.
		if f.Class == Honoured && (f.Key == "" && f.Path != "featureGates" && f.Path != "failCgroupV1" || f.set == nil) {
			t.Errorf("%s is honoured without a nodelet key and a setter", f.Path)
		}
		if f.Class != Honoured && f.Note == "" {
			t.Errorf("%s is %s without a reason", f.Path, f.Class)
		}
	}
	var missing []string
	all := map[string]bool{}
	leafPaths(reflect.TypeFor[kubeletv1beta1.KubeletConfiguration](), "", named, &missing, all)
	for _, p := range missing {
		t.Errorf("KubeletConfiguration field %s is not in the table (internal/kubeletcompat/fields.go): honour it onto a nodelet key or refuse it", p)
	}
	for p := range named {
		if !all[p] {
			t.Errorf("%s is in the table but not a KubeletConfiguration field (gone from k8s.io/kubelet?)", p)
		}
	}
}

// Every flag is classified: a config flag names a field of the table, the
// others are in NodeFlags, and NodeFlags names no flag that is not there.
func TestFlagsClassified(t *testing.T) {
	fs := newFlagSet(newFlags(), &kubeletv1beta1.KubeletConfiguration{})
	node := map[string]bool{}
	for _, f := range NodeFlags {
		node[f.Name] = true
		if fs.Lookup(f.Name) == nil {
			t.Errorf("NodeFlags names --%s, which is not registered", f.Name)
		}
	}
	inTable := map[string]bool{}
	for _, f := range Table {
		inTable[f.Path] = true
	}
	fs.VisitAll(func(f *flagT) {
		field, ok := configFlagFields()[f.Name]
		switch {
		case ok && node[f.Name]:
			t.Errorf("--%s is both a config flag and a node flag", f.Name)
		case ok && !inTable[field]:
			t.Errorf("--%s sets %s, which is not in the table", f.Name, field)
		case !ok && !node[f.Name]:
			t.Errorf("--%s is not classified", f.Name)
		}
	})
}

// The flags are the real kubelet's: every flag of `kubelet --help` of the
// kubelet the bench builds (scripts/controlplane.sh tools kubelet) is
// here, and only removedFlags are here beyond them.
func TestFlagsMatchRealKubelet(t *testing.T) {
	bin := os.Getenv("KUBELET_BIN")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "nodelet", "k8s-"+gatesVersion, "kubelet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no kubelet binary (%v): scripts/controlplane.sh tools kubelet builds it", err)
	}
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	var real []string
	for _, m := range regexp.MustCompile(`(?m)^  (?:    |-[a-z], )--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		real = append(real, m[1])
	}
	if len(real) < 100 {
		t.Fatalf("kubelet --help listed %d flags:\n%s", len(real), out)
	}
	fs := newFlagSet(newFlags(), &kubeletv1beta1.KubeletConfiguration{})
	for _, name := range real {
		if fs.Lookup(name) == nil {
			t.Errorf("the kubelet has --%s; nodelet kubelet does not", name)
		}
	}
	fs.VisitAll(func(f *flagT) {
		if !slices.Contains(real, f.Name) && removedFlags[f.Name] == "" {
			t.Errorf("nodelet kubelet has --%s; the kubelet does not", f.Name)
		}
	})
}

func TestDocInSync(t *testing.T) {
	got, err := os.ReadFile("../../docs/kubelet-compat.md")
	if err != nil || string(got) != Markdown() {
		t.Fatalf("docs/kubelet-compat.md is stale (%v): run go generate ./internal/kubeletcompat/", err)
	}
}

type flagT = pflag.Flag
