package sources

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

func TestDecodeManifest(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/manifests/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name     string
		in       string
		pods     []string // names, in order
		warnings int
		errHas   string
	}{
		{name: "yaml pod", in: read("pod.yaml"), pods: []string{"web"}},
		{name: "json pod", in: read("pod.json"), pods: []string{"api"}},
		{name: "yaml pod list", in: read("list.yaml"), pods: []string{"one", "two"}},
		{name: "empty list", in: `{"apiVersion":"v1","kind":"PodList","items":[]}`, pods: nil},
		{name: "unknown field is a warning", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: u}\nspec:\n  containers:\n  - name: c\n    image: x\n    imagee: y\n",
			pods: []string{"u"}, warnings: 1},
		{name: "empty", in: "  \n", errHas: "empty"},
		{name: "comment only", in: "# nothing here\n", errHas: "Kind"},
		{name: "not a pod", in: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}`, errHas: "/v1, Kind=Service, not a v1 Pod"},
		{name: "unknown kind", in: `{"apiVersion":"v1","kind":"Widget"}`, errHas: "Widget"},
		{name: "no kind", in: `{"metadata":{"name":"x"}}`, errHas: "Kind"},
		{name: "broken yaml", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n", errHas: "cannot decode"},
		{name: "half written", in: read("pod.yaml")[:97], errHas: "cannot decode"},
		{name: "bad quantity", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources: {limits: {cpu: lots}}\n",
			errHas: "quantities must match"},
		{name: "too large", in: strings.Repeat(" ", maxManifestSize+1), errHas: "more than the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeManifest([]byte(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range m.Pods {
				names = append(names, p.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.pods, ",") {
				t.Errorf("pods = %v, want %v", names, tc.pods)
			}
			if len(m.Warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", m.Warnings, tc.warnings)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes through everything a manifest goes
// through before it reaches the merge: decode, defaults, identity,
// validation. Nothing may panic; a result must be either pods or an error.
// Seeds are in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"pod.yaml", "pod.json", "list.yaml"} {
		b, err := os.ReadFile("testdata/manifests/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest(data)
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		// The whole static pod path must hold up too.
		var events []schemas.Event
		sp := &staticParser{nodeName: "Fuzz-Node", log: discardLogger(), emit: func(e schemas.Event) { events = append(events, e) }}
		o := &origin{name: "/etc/nodelet/pods/fuzz.yaml", isFile: true}
		sp.load(o, data)
		for _, p := range o.pods {
			if p.UID == "" || p.Spec.NodeName != "Fuzz-Node" || p.Status.Phase != corev1.PodPending {
				t.Fatalf("accepted pod without identity: %+v", p.ObjectMeta)
			}
			if errs := validatePod(p); len(errs) > 0 {
				t.Fatalf("accepted pod does not validate: %v", errs)
			}
		}
		if len(o.pods)+len(events) < len(m.Pods) {
			t.Fatalf("%d pods decoded but only %d accepted and %d rejected", len(m.Pods), len(o.pods), len(events))
		}
	})
}
